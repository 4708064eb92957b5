-- 0018: a throttle's excess folded into a digest (issue 17) is a feed
-- item of the recipient's own feed, posted when the notification is
-- settled; it carries the notification's own message (rendered from a
-- template at accept) when it has one. NULL: the event's message, as for
-- every item posted at accept.
ALTER TABLE feed_items ADD COLUMN message BLOB;
