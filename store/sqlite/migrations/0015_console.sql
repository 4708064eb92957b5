-- 0015: what the console needs. Who retried a notification, kept with it
-- (prune deletes a notification's rows with it); and indexes for its
-- search: by address ("did the code go to +15550100?"), which a person
-- types more often than a recipient id, ending in id as the recipient
-- index does, so a tenant's page is a range read in id order; by type
-- within a tenant, also in id order; and by creation time within a
-- tenant, for a time range.

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
CREATE INDEX notifications_type ON notifications (tenant, type, id);
CREATE INDEX notifications_created ON notifications (tenant, created_at);
