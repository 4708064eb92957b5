-- 0027: workflow runs (issue 26). An event whose type has a workflow
-- becomes one run per recipient, written in the accept's transaction in
-- place of its notifications: (event, seq), the recipient's position in
-- the fan-out, is unique, so a redelivered event or a fan-out chunk
-- written twice adds no run. step is the next step to decide and due_at
-- when (a delay is a due time, not a sleeping goroutine); the stepper
-- takes only waiting runs, so a cancelled run sends nothing more.
CREATE TABLE workflow_runs (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant     TEXT    NOT NULL,
    event      INTEGER NOT NULL REFERENCES events (id),
    seq        INTEGER NOT NULL,  -- the recipient's position in the event's fan-out
    recipient  TEXT    NOT NULL,
    type       TEXT    NOT NULL,
    version    INTEGER NOT NULL,  -- the workflow version the run started with, kept to its end
    step       INTEGER NOT NULL DEFAULT 0,
    attempt    INTEGER NOT NULL DEFAULT 0, -- an undelivered fallback: the position after the channel tried last (0: none yet)
    state      TEXT    NOT NULL DEFAULT 'waiting' CHECK (state IN ('waiting', 'done', 'cancelled')),
    due_at     INTEGER NOT NULL,  -- ms: when waiting, its step is decided not before this
    cancel_key TEXT,              -- the workflow's cancel_key for the event; an event with "cancels" set to it stops the run
    reason     TEXT,              -- why it is done or cancelled
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    UNIQUE (event, seq)
);
CREATE INDEX workflow_runs_due ON workflow_runs (due_at) WHERE state = 'waiting';
CREATE INDEX workflow_runs_cancel ON workflow_runs (tenant, cancel_key) WHERE state = 'waiting' AND cancel_key IS NOT NULL;
CREATE INDEX workflow_runs_tenant ON workflow_runs (tenant, state, id);
CREATE INDEX workflow_runs_finished ON workflow_runs (updated_at) WHERE state <> 'waiting'; -- what prune takes

-- What was decided at each step of a run, and why: written once, in the
-- transaction that decides the step (for an undelivered fallback, once per
-- channel tried), with the notification or in-app item
-- it wrote (a step skipped or a delay writes neither).
CREATE TABLE workflow_steps (
    run          INTEGER NOT NULL REFERENCES workflow_runs (id),
    step         INTEGER NOT NULL,
    attempt      INTEGER NOT NULL DEFAULT 0, -- the channel's position in the step (an undelivered fallback writes one row per channel tried)
    step_id      TEXT    NOT NULL,
    outcome      TEXT    NOT NULL CHECK (outcome IN ('sent', 'skipped', 'delayed')),
    reason       TEXT    NOT NULL,
    due_at       INTEGER NOT NULL,  -- ms: when the step became due
    decided_at   INTEGER NOT NULL,  -- ms
    notification INTEGER,           -- the notification it wrote
    feed_seq     INTEGER,           -- the in-app item it posted (the tenant's feed sequence)
    PRIMARY KEY (run, step, attempt)
) WITHOUT ROWID;
CREATE INDEX workflow_steps_notification ON workflow_steps (notification) WHERE notification IS NOT NULL; -- show: the run of a step's notification
