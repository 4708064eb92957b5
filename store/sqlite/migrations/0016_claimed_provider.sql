-- 0016: the provider a claim's call goes to, by name, written by the claim
-- itself (before the call): lease recovery records a call a crash cut short
-- as that provider's and pins the notification there, even after the routes
-- changed. NULL: a claim made without routes (or by an older binary); the
-- dispatcher then goes by the route position, as before.
ALTER TABLE notifications ADD COLUMN claimed_provider TEXT;
