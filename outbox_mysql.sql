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
