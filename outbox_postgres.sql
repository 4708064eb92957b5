-- The transactional outbox for an application on PostgreSQL
-- (`edgerelay tail --source 'postgres://…'`; README, "Tailing an outbox").
-- Create it in the APPLICATION's database; write the business row and the
-- outbox row in ONE transaction. Ids come from the identity sequence: a
-- transaction takes one at its insert and shows the row at its commit, so
-- rows commit out of id order; edgerelay keeps the ids it has not seen yet
-- below its position as gaps and reads them again until they commit or
-- every transaction that could commit them has ended.
CREATE TABLE edgerelay_outbox (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event      jsonb NOT NULL,  -- the event, as POST /v1/events takes it
    created_at timestamptz NOT NULL DEFAULT now()
);
