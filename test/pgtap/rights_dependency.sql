-- sbqueue pgTAP: what keeps a role with queue rights from being dropped is its own. A
-- role with rights has a privilege dependency of the empty view sbq.queue_rights,
-- which nobody grants anything on. Kept on the public view sbq_rights (as before this
-- test), it mixed with real privileges there: a GRANT and REVOKE on that view erased
-- it, and a queue manager's revoke of another role's rights erased that role's real
-- privilege's dependency; either let DROP ROLE through and left rights or an ACL
-- naming a dropped role.
BEGIN;
SELECT plan(5);

CREATE ROLE sbq_rd_gb;
CREATE ROLE sbq_rd_mon;
CREATE ROLE sbq_rd_eve;
DO $$ BEGIN
    PERFORM sbq_create_queue('rd_q');
    PERFORM sbq_grant('rd_q', 'sbq_rd_gb', ARRAY['send']);
    PERFORM sbq_create_queue('rd_eveq');
    PERFORM sbq_grant('rd_eveq', 'sbq_rd_eve', ARRAY['manage']);
END $$;

GRANT SELECT ON sbq_rights TO sbq_rd_gb;
REVOKE SELECT ON sbq_rights FROM sbq_rd_gb;
SELECT throws_ok('DROP ROLE sbq_rd_gb', '2BP01', NULL,
    'RD1: a GRANT and REVOKE on the view sbq_rights leave a role''s rights what keeps it from being dropped');

GRANT SELECT ON sbq_rights TO sbq_rd_mon;
SET ROLE sbq_rd_eve;
DO $$ BEGIN
    PERFORM sbq_revoke('rd_eveq', 'sbq_rd_mon', ARRAY['send']);
END $$;
RESET ROLE;
SELECT throws_ok('DROP ROLE sbq_rd_mon', '2BP01', NULL,
    'RD2: a manager''s revoke of another role''s rights leaves that role''s real privileges holding it');
SELECT ok((SELECT relacl::text FROM pg_class WHERE oid = 'sbq_rights'::regclass) ~ 'sbq_rd_mon=r',
    'RD3: ... and those privileges');

DO $$ BEGIN
    PERFORM sbq_revoke('rd_q', 'sbq_rd_gb', ARRAY['send']);
END $$;
SELECT lives_ok('DROP ROLE sbq_rd_gb', 'RD4: once its last right is revoked, the role can be dropped');
SELECT is((SELECT count(*) FROM sbq.queue_rights), 0::bigint, 'RD5: the marker view shows nothing');

SELECT * FROM finish();
ROLLBACK;
