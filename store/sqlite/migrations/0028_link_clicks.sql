-- 0028: clicks on tracked links. A template's `track` helper turns a link
-- into a signed redirect that names the notification (by its key) and the
-- link; each click the redirect records here, one row per notification
-- and link, counted. A workflow step's `clicked` condition reads it, and
-- `show` lists it. No REFERENCES: prune deletes a notification's clicks
-- in the write that deletes the notification.
CREATE TABLE link_clicks (
    notification INTEGER NOT NULL,
    url          TEXT    NOT NULL,
    count        INTEGER NOT NULL,
    first_at     INTEGER NOT NULL, -- ms
    last_at      INTEGER NOT NULL, -- ms
    PRIMARY KEY (notification, url)
) WITHOUT ROWID;
