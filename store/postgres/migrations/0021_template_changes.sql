-- 0021: as store/sqlite's 0021: the template generation of each row's
-- last change (its version made, or retired), so that a refresh reads only
-- the keys changed since the generation it loaded. Rows from before are 0.
ALTER TABLE templates ADD COLUMN changed_gen bigint NOT NULL DEFAULT 0;
CREATE INDEX templates_changed ON templates (changed_gen);
