-- 0022: each audience member's recipient id, with an index, so the relay
-- decides whether a digest carries a recipient (a throttle's excess folded
-- into it) by looking up that one member, not by reading the whole
-- audience. PutAudience writes the id the relay gives it; existing members
-- take theirs from their JSON (every member the relay wrote has an "id").
-- Ids are unique within an audience (the relay refuses a repeat), but a
-- lookup takes the first in seq order regardless, which the index's order
-- gives.
--
-- The table is rebuilt rather than altered, so the schema reads as one
-- definition (ADD COLUMN would splice the column into 0002's text).
CREATE TABLE audience_members_new (
    tenant       TEXT    NOT NULL,
    audience     TEXT    NOT NULL,
    seq          INTEGER NOT NULL,              -- position in the audience, from 0
    recipient    TEXT    NOT NULL,              -- the recipient as JSON, opaque to the store
    recipient_id TEXT    NOT NULL,              -- its id, as the relay gave it
    PRIMARY KEY (tenant, audience, seq),
    FOREIGN KEY (tenant, audience) REFERENCES audiences (tenant, name) ON DELETE CASCADE
) WITHOUT ROWID;

INSERT INTO audience_members_new (tenant, audience, seq, recipient, recipient_id)
SELECT tenant, audience, seq, recipient, coalesce(json_extract(recipient, '$.id'), '') FROM audience_members;

DROP TABLE audience_members;
ALTER TABLE audience_members_new RENAME TO audience_members;

CREATE INDEX audience_members_recipient ON audience_members (tenant, audience, recipient_id, seq);
