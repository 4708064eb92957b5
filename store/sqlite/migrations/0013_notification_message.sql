-- 0013: a notification's own message, rendered from a template for its
-- recipient at accept; NULL: the event's message, as before. Every attempt
-- sends it as stored.
ALTER TABLE notifications ADD COLUMN message BLOB;
