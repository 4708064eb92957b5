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

-- [debezium] A Debezium outbox (shape=debezium): the table Debezium's
-- outbox event router reads, tailed as the application already writes it:
--
--   edgerelay tail --source 'postgres://…/app?table=outbox&shape=debezium'
--
-- Its id is a UUID, which has no order: a poll cannot ask for "the rows
-- after the last one read", nor tell which rows between two it has seen
-- are still to commit. The one change is a column the database fills,
-- which orders the rows and whose missing numbers are the gaps waited on:
-- the application's INSERTs, which name their columns, stay as they are
-- (an INSERT without a column list would need one). ADD COLUMN numbers the
-- existing rows too.
--
--   CREATE TABLE outbox (
--       id            uuid PRIMARY KEY,
--       aggregatetype varchar(255) NOT NULL,
--       aggregateid   varchar(255) NOT NULL,
--       type          varchar(255) NOT NULL,
--       payload       jsonb
--   );
--   ALTER TABLE outbox ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY;
--   CREATE UNIQUE INDEX outbox_seq ON outbox (seq);
--
-- The event: id from id (a re-read is a duplicate), type from type, the
-- aggregate in data.aggregate_type and data.aggregate_id, and the rest
-- from payload, a JSON object: recipients (or audience, feeds), subject,
-- body, data … Debezium reads the log, so its applications often delete
-- the outbox row in the same transaction; a poll never sees such a row:
-- delete rows only once they are relayed (say, a day later).
