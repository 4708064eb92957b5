-- 0022: as store/sqlite's 0022. Each audience member's recipient id, with
-- an index, so the relay decides whether a digest carries a recipient (a
-- throttle's excess folded into it) by looking up that one member, not by
-- reading the whole audience. PutAudience writes the id the relay gives
-- it; existing members take theirs from their JSON (every member the relay
-- wrote has an "id"). A lookup takes the first in seq order if several
-- share an id (the relay refuses a repeat; the index's order gives it).
-- The default only fills the existing rows before the UPDATE; it is
-- dropped, so a writer that forgets the id fails rather than writes ''.
ALTER TABLE audience_members ADD COLUMN recipient_id text NOT NULL DEFAULT '';
UPDATE audience_members SET recipient_id = coalesce(recipient::jsonb->>'id', '');
ALTER TABLE audience_members ALTER COLUMN recipient_id DROP DEFAULT;
CREATE INDEX audience_members_recipient ON audience_members (tenant, audience, recipient_id, seq);
