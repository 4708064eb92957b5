-- 0008: what the console needs. Who retried a notification, kept with it
-- (prune deletes a notification's rows with it); and an index for finding
-- notifications by address ("did the code go to +15550100?"), which a
-- person types more often than a recipient id. Like the recipient index it
-- ends in id, so a tenant's page is a range read in id order.

CREATE TABLE notification_audit (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    notification INTEGER NOT NULL,       -- no REFERENCES: prune deletes both in one write
    at           INTEGER NOT NULL,
    actor        TEXT    NOT NULL,       -- who, as the caller names them (never a secret)
    action       TEXT    NOT NULL,       -- retry
    detail       TEXT
);

CREATE INDEX notification_audit_notification ON notification_audit (notification, id);

CREATE INDEX notifications_address ON notifications (address, tenant, id);
