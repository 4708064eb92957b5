-- 0031: throttle steps, as store/sqlite's 0031: the slots runs took
-- passing a throttle step, one per (run, step), counted per window
-- (type/step-id) and recipient; expires_at is when one stops counting.
-- The deciding transaction counts a window under its advisory lock.
CREATE TABLE workflow_slots (
    run        bigint  NOT NULL,
    step       integer NOT NULL,
    tenant     text    NOT NULL,
    recipient  text    NOT NULL,
    scope      text    NOT NULL,
    taken_at   bigint  NOT NULL,
    expires_at bigint  NOT NULL,
    PRIMARY KEY (run, step)
);
CREATE INDEX workflow_slots_window ON workflow_slots (tenant, recipient, scope, taken_at);
CREATE INDEX workflow_slots_expires ON workflow_slots (expires_at);

ALTER TABLE workflow_steps DROP CONSTRAINT workflow_steps_outcome_check;
ALTER TABLE workflow_steps ADD CONSTRAINT workflow_steps_outcome_check CHECK (outcome IN ('sent', 'skipped', 'delayed', 'batched', 'passed', 'throttled'));
