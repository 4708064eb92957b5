-- The transactional outbox for an application on MySQL or MariaDB
-- (`edgerelay tail --source 'mysql://…'`; README, "Tailing an outbox").
-- Create it in the APPLICATION's database (InnoDB: transactions); write the
-- business row and the outbox row in ONE transaction. AUTO_INCREMENT ids
-- are taken at the insert and shown at the commit, so rows commit out of
-- id order; edgerelay keeps the ids it has not seen yet below its position
-- as gaps and reads them again until they commit or every transaction that
-- could commit them has ended.
CREATE TABLE edgerelay_outbox (
    id         BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    event      JSON NOT NULL,  -- the event, as POST /v1/events takes it
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB;

-- [debezium] A Debezium outbox (shape=debezium): the table Debezium's
-- outbox event router reads, tailed as the application already writes it:
--
--   edgerelay tail --source 'mysql://…/app?table=outbox&shape=debezium'
--
-- Its id is a UUID, which has no order: a poll cannot ask for "the rows
-- after the last one read", nor tell which rows between two it has seen
-- are still to commit. The one change is a column the database fills,
-- which orders the rows and whose missing numbers are the gaps waited on:
-- the application's INSERTs, which name their columns, stay as they are
-- (an INSERT without a column list would need one). ADD COLUMN numbers the
-- existing rows too; it rebuilds the table (an online schema tool avoids
-- the lock on a big one). A table has one AUTO_INCREMENT column at most,
-- and it must be a key: UNIQUE.
--
--   CREATE TABLE outbox (
--       id            CHAR(36) NOT NULL PRIMARY KEY,
--       aggregatetype VARCHAR(255) NOT NULL,
--       aggregateid   VARCHAR(255) NOT NULL,
--       type          VARCHAR(255) NOT NULL,
--       payload       JSON
--   ) ENGINE=InnoDB;
--   ALTER TABLE outbox ADD COLUMN seq BIGINT NOT NULL AUTO_INCREMENT UNIQUE;
--
-- The event: id from id (a re-read is a duplicate), type from type, the
-- aggregate in data.aggregate_type and data.aggregate_id, and the rest
-- from payload, a JSON object: recipients (or audience, feeds), subject,
-- body, data … A UUID kept as BINARY(16) is not text: map a generated
-- column instead (ADD COLUMN id_text CHAR(36) AS (BIN_TO_UUID(id)), and
-- map=id:id_text,…). Debezium reads the binlog, so its applications often
-- delete the outbox row in the same transaction; a poll never sees such a
-- row: delete rows only once they are relayed (say, a day later).
