-- The transactional outbox, for an application that keeps its data in SQLite
-- and wants edgerelay to send its notifications (`edgerelay tail --help`).
--
-- Create this table in the APPLICATION's database (not in edgerelay's). The
-- application writes its business row and an outbox row in ONE transaction of
-- its own: either both are committed or neither, so a notification is never
-- sent for an order that was rolled back, and never lost for one that was
-- committed. edgerelay reads the outbox in id order and accepts each event as
-- POST /v1/events would; it dedupes on the event's identity (tenant, id,
-- purpose), so rows it reads twice (after a crash) notify nobody twice.
--
--   edgerelay tail --source 'sqlite:///srv/app/app.db?table=edgerelay_outbox'

CREATE TABLE edgerelay_outbox (
    -- AUTOINCREMENT is required: edgerelay remembers the last id it relayed,
    -- and without it SQLite may hand the id of a deleted newest row to the
    -- next insert, which would then never be read.
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    -- The event JSON, exactly as POST /v1/events takes it. Its "id" must be
    -- the application's id for what happened (an order id, a payment id):
    -- it is what makes a re-read a duplicate instead of a second message.
    event        TEXT NOT NULL,
    created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    -- Set by edgerelay once the event is durably accepted, only when tailed
    -- with ?mark_processed=true (otherwise the database is opened read-only
    -- and this stays NULL). A row left NULL below the tailer's position was
    -- rejected (invalid event): the tail log names it. The application may
    -- delete processed rows; ids are never reused (AUTOINCREMENT).
    processed_at TEXT
);

-- The application's transaction, for example (one transaction, two rows):
--
--   BEGIN;
--   INSERT INTO orders (id, customer_id, total_cents) VALUES ('ord_1042', 'cus_7', 4999);
--   INSERT INTO edgerelay_outbox (event) VALUES (json_object(
--       'id',         'ord_1042',
--       'type',       'order.created',
--       'purpose',    'receipt',
--       'recipients', json_array(json_object('id', 'cus_7', 'email', 'ada@example.com')),
--       'subject',    'Your order ord_1042',
--       'body',       'Thank you for your order.'));
--   COMMIT;
--
-- Cleaning up, if the application wants to (with ?mark_processed=true):
--
--   DELETE FROM edgerelay_outbox WHERE processed_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-7 days');

-- [debezium] A Debezium-shaped outbox (shape=debezium): id, aggregatetype,
-- aggregateid, type, payload, as Debezium's outbox event router reads it:
--
--   edgerelay tail --source 'sqlite:///srv/app/app.db?table=outbox&shape=debezium'
--
-- Its id is a UUID, which has no order; the rows are read in the order of
-- seq, which SQLite assigns. SQLite cannot add a primary key to a table:
-- create it so (or anew, copying the rows in rowid order, then drop the
-- old one and rename the new). INSERTs that name their columns stay as
-- they are.
--
--   CREATE TABLE outbox (
--       seq           INTEGER PRIMARY KEY AUTOINCREMENT,
--       id            TEXT NOT NULL UNIQUE,
--       aggregatetype TEXT NOT NULL,
--       aggregateid   TEXT NOT NULL,
--       type          TEXT NOT NULL,
--       payload       TEXT
--   );
--
-- The event: id from id (a re-read is a duplicate), type from type, the
-- aggregate in data.aggregate_type and data.aggregate_id, and the rest
-- from payload, a JSON object: recipients (or audience, feeds), subject,
-- body, data … (with ?mark_processed=true the table needs processed_at
-- too, as above).
