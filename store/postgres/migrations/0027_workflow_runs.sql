-- 0027: workflow runs (issue 26), as store/sqlite's 0027: one run per
-- recipient of an event whose type has a workflow, written in the
-- accept's transaction; (event, seq) unique, so a redelivery adds none;
-- step is the next step to decide, due_at when. The stepper locks a run's
-- row (FOR UPDATE SKIP LOCKED) in the transaction that decides its step,
-- so two nodes never decide one step.
CREATE TABLE workflow_runs (
    id         bigserial PRIMARY KEY,
    tenant     text    NOT NULL,
    event      bigint  NOT NULL REFERENCES events (id),
    seq        integer NOT NULL,
    recipient  text    NOT NULL,
    type       text    NOT NULL,
    version    integer NOT NULL,
    step       integer NOT NULL DEFAULT 0,
    attempt    integer NOT NULL DEFAULT 0,
    state      text    NOT NULL DEFAULT 'waiting' CHECK (state IN ('waiting', 'done', 'cancelled')),
    due_at     bigint  NOT NULL, -- ms
    cancel_key text,
    reason     text,
    created_at bigint  NOT NULL,
    updated_at bigint  NOT NULL,
    UNIQUE (event, seq)
);
CREATE INDEX workflow_runs_due ON workflow_runs (due_at) WHERE state = 'waiting';
CREATE INDEX workflow_runs_cancel ON workflow_runs (tenant, cancel_key) WHERE state = 'waiting' AND cancel_key IS NOT NULL;
CREATE INDEX workflow_runs_tenant ON workflow_runs (tenant, state, id);
CREATE INDEX workflow_runs_finished ON workflow_runs (updated_at) WHERE state <> 'waiting'; -- what prune takes

CREATE TABLE workflow_steps (
    run          bigint  NOT NULL REFERENCES workflow_runs (id),
    step         integer NOT NULL,
    attempt      integer NOT NULL DEFAULT 0,
    step_id      text    NOT NULL,
    outcome      text    NOT NULL CHECK (outcome IN ('sent', 'skipped', 'delayed')),
    reason       text    NOT NULL,
    due_at       bigint  NOT NULL,
    decided_at   bigint  NOT NULL,
    notification bigint,
    feed_seq     bigint,
    PRIMARY KEY (run, step, attempt)
);
CREATE INDEX workflow_steps_notification ON workflow_steps (notification) WHERE notification IS NOT NULL; -- show: the run of a step's notification
