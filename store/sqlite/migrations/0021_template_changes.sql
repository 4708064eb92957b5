-- 0021: the template generation of each row's last change (its version
-- made, or retired), so that a node refreshing its templates reads only
-- the keys changed since the generation it loaded, not all of them. Rows
-- from before are 0: a node loads everything once at start.
ALTER TABLE templates ADD COLUMN changed_gen INTEGER NOT NULL DEFAULT 0;
CREATE INDEX templates_changed ON templates (changed_gen);
