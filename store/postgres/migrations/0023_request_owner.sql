-- 0023: which process holds an in-flight request key (Relay's lease holder
-- id: host, pid and a random part). A retry that reaches a process which
-- knows that owner is no longer running the request (it died, or it is the
-- retry's own process, whose release of a failed request never reached the
-- store) takes the key over at once instead of waiting for the claim to
-- lapse. Rows from before have no owner and lapse as they did.
ALTER TABLE request_keys ADD COLUMN owner text NOT NULL DEFAULT '';
