-- 0031: one kind of throttle slot for category throttles and throttle
-- steps, as store/sqlite's 0031: held by a notification ('n' and its id)
-- or a run's throttle step ('r', the run, '.', the step), counted per
-- window (tenant, recipient, scope: a category, or type/step-id) under the
-- window's advisory lock; expires_at is when a slot stops counting, and
-- prune deletes it then. Slots taken before this migration expire 366
-- days after they were taken.
CREATE TABLE throttle_slots_0031 (
    holder     text   PRIMARY KEY,
    tenant     text   NOT NULL,
    recipient  text   NOT NULL,
    scope      text   NOT NULL,
    taken_at   bigint NOT NULL,
    expires_at bigint NOT NULL
);
INSERT INTO throttle_slots_0031 SELECT 'n' || notification, tenant, recipient, category, taken_at, taken_at + 366 * 86400000::bigint FROM throttle_slots;
DROP TABLE throttle_slots;
ALTER TABLE throttle_slots_0031 RENAME TO throttle_slots;
ALTER TABLE throttle_slots RENAME CONSTRAINT throttle_slots_0031_pkey TO throttle_slots_pkey;
CREATE INDEX throttle_slots_window ON throttle_slots (tenant, recipient, scope, taken_at);
CREATE INDEX throttle_slots_expires ON throttle_slots (expires_at);

ALTER TABLE workflow_steps DROP CONSTRAINT workflow_steps_outcome_check;
ALTER TABLE workflow_steps ADD CONSTRAINT workflow_steps_outcome_check CHECK (outcome IN ('sent', 'skipped', 'delayed', 'batched', 'passed', 'throttled'));
