-- 0025: the console's sessions, kept in the store rather than in a cookie
-- signed by a key of each process: a logout on one node ends the session on
-- every node, and a sign-in on one works on all. The cookie holds a random
-- id; only its SHA-256 is kept here, so a copy of the database opens no
-- session.
CREATE TABLE console_sessions (
    id_hash    text    NOT NULL PRIMARY KEY, -- hex SHA-256 of the cookie's id
    tenant     text    NOT NULL,
    token_hash text    NOT NULL,             -- the token signed in with; '' for the open console
    who        text    NOT NULL,             -- names the session in the audit trail
    created_at bigint  NOT NULL,             -- ms
    expires_at bigint  NOT NULL              -- ms
);

-- Expired sessions are pruned oldest first.
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);
