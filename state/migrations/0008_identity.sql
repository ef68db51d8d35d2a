-- Proven actors and signed approvals. An approval records how its actor
-- was proven (unix:USER or key:FINGERPRINT). A signed approval (an SSH
-- signature over its statement, nlx approve --sign) is recorded when the
-- apply that uses it commits, with its signature's digest, unique: the same
-- signature is never used twice.
ALTER TABLE approvals ADD COLUMN proof TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN signature TEXT;
CREATE UNIQUE INDEX approvals_signature ON approvals (signature) WHERE signature IS NOT NULL;
