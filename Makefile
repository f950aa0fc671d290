# sbqueue: Azure Service Bus style queues for PostgreSQL (PGXS build)

EXTENSION = sbqueue
EXTVERSION = $(shell sed -n "s/^default_version *= *'\(.*\)'/\1/p" $(EXTENSION).control)

MODULE_big = sbqueue
OBJS = src/sbqueue.o src/api.o src/api_queues.o src/util.o \
       src/storage_core.o src/plan_key.o src/queues.o src/send.o src/send_direct.o src/counts_direct.o src/receive.o src/lease_receive.o src/lease_sweep.o \
       src/settle.o src/api_settle.o src/topics.o src/api_topics.o src/rules.o src/topic_send.o src/forward.o src/maintain.o src/metrics.o src/rights.o src/session.o src/session_guard.o src/session_mem.o src/session_probe.o src/session_ready.o src/api_session.o \
       src/distributed.o src/dist_route.o src/dist_log.o src/dist_layout.o src/dist_storage.o src/dist_views.o src/shmem.o src/wait.o src/registry.o src/lease.o src/qstate.o src/undo.o \
       src/launcher.o src/maintenance_worker.o src/utility_hook.o \
       src/filter_lex.o src/filter_parse.o src/filter_eval.o src/filter_action.o
PGFILEDESC = "sbqueue - Azure Service Bus style queues"

DATA_built = sql/$(EXTENSION)--$(EXTVERSION).sql
# the upgrade scripts and 0.1 as released (a full script left by an older build is not installed)
DATA = $(wildcard sql/$(EXTENSION)--*--*.sql) sql/$(EXTENSION)--0.1.sql

# pg_regress: inputs in sql/, expected outputs in expected/
REGRESS = test_setup create queue_management send receive settle defer deadletter ttl scheduled \
          duplicates maintain lease filter send_direct
REGRESS_OPTS = --load-extension=$(EXTENSION)

# isolation specs: test/specs, expected outputs in test/expected. Those of
# ISOLATION_SLOW mostly wait for a lock to run out (5 s at least) and count what
# sbq_maintain() did in their database: "make installcheck-parallel" runs each of them
# in a database of its own, all at once, beside the usual run of the rest
ISOLATION_FAST = receive_once receive_disjoint settle_race send_visibility receive_rollback defer_dlq \
            queue_management_delete_in_flight \
            receive_repeatable_read receive_head_hint receive_head_hint_rollback receive_free_hint \
            queue_management_delete_moving rights_dependency_race \
            session_accept_race session_accept_next_skips_held \
            session_release_unsettled \
            settle_report_race topics_send_vs_delete topics_forward_vs_change forwarding_vs_delete \
            forwarding_dead_letters_vs_update metrics_text_swap \
            maintain_stats_one_instant rights_forward_recreate
ISOLATION_SLOW = lock_lost_expiry lock_lost_renew_vs_expiry maintain_row_locks lease_store_recheck \
            session_order session_expiry_vs_settle maintain_vs_delete_topic metrics_counters_move \
            metrics_received_in_flight
ISOLATION = $(ISOLATION_FAST) $(ISOLATION_SLOW)
EXTRA_CLEAN = output_iso_slow/
ISOLATION_OPTS = --inputdir=test --load-extension=$(EXTENSION)

PG_CFLAGS = -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -Werror=implicit-function-declaration

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# make installcheck, with the specs of ISOLATION_SLOW each in a database of its own
# (sbq_iso_SPEC, output in output_iso_slow/SPEC/) beside the rest, all at once
.PHONY: installcheck-parallel
installcheck-parallel:
	@rm -rf output_iso_slow; pids=; \
	for t in $(ISOLATION_SLOW); do \
		mkdir -p output_iso_slow/$$t; \
		{ $(pg_isolation_regress_installcheck) $(ISOLATION_OPTS) --dbname=sbq_iso_$$t \
			--outputdir=output_iso_slow/$$t $$t >output_iso_slow/$$t/run.log 2>&1; \
		  echo $$? >output_iso_slow/$$t/rc; } & pids="$$pids $$!"; \
	done; \
	$(MAKE) installcheck ISOLATION="$(ISOLATION_FAST)"; rc=$$?; wait $$pids; \
	for t in $(ISOLATION_SLOW); do \
		grep -h "^\(not \)\?ok\|^test \|failed" output_iso_slow/$$t/run.log; \
		[ "$$(cat output_iso_slow/$$t/rc)" = 0 ] || rc=1; \
	done; \
	exit $$rc

sql/$(EXTENSION)--$(EXTVERSION).sql: sql/$(EXTENSION).sql
	cp $< $@

# PGXS tracks no header dependencies: every object is rebuilt when a header changes
$(OBJS): $(wildcard src/*.h)

# TAP tests (test/t/*.pl, PostgreSQL::Test::Cluster) against the installed build, as
# PGXS's prove_installcheck runs them: each test starts servers of its own. The recipe
# is test/t/run.sh, which finds Debian's PostgreSQL::Test modules under pg_config's
# pgxs directory and, as root, runs the tests as the postgres user (initdb refuses
# root). One feature: make prove_installcheck PROVE_TESTS='test/t/lease_*.pl'
PROVE_TESTS = test/t/*.pl
.PHONY: prove_installcheck
prove_installcheck:
	PG_CONFIG='$(PG_CONFIG)' test/t/run.sh $(PROVE_FLAGS) $(PROVE_TESTS)

# PGXN: the release zip PGXN takes, sbqueue-X.Y.Z.zip holding sbqueue-X.Y.Z/ with
# META.json at its top, from the last commit (commit first). X.Y.Z is
# default_version as a semantic version (0.11 is 0.11.0), as in META.json.
# To write it elsewhere: make dist DIST_DIR=/some/dir
DISTVERSION = $(if $(word 3,$(subst ., ,$(EXTVERSION))),$(EXTVERSION),$(EXTVERSION).0)
DIST_DIR = .
.PHONY: dist
dist:
	git archive --format zip --prefix=$(EXTENSION)-$(DISTVERSION)/ \
		-o $(DIST_DIR)/$(EXTENSION)-$(DISTVERSION).zip HEAD
