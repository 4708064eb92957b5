-- 0024: suppression entries and notifications' address_key in one normal
-- form (edgerelay/internal/addrkey: NFC; for email the local part
-- lower-cased and the domain IDNA-mapped), so another spelling of a listed
-- address is the same key. SQL has no NFC: the re-keying is a Go step
-- (rekeySuppressions, rekey.go) run in this migration's transaction.
-- Entries that meet at one key merge into the one that lasts longest.
SELECT 1;
