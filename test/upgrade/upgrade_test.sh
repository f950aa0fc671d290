#!/usr/bin/env bash
# test/upgrade/upgrade_test.sh: install every released version of sbqueue,
# upgrade it step by step to the current one, and check after each step that
# messages sent before the upgrade are still there; at the end the upgraded
# extension must match a fresh install object by object.
#
# Between installing a new build and running ALTER EXTENSION UPDATE, the new
# library runs with the SQL of the old version: so at each old version, before
# its update, the current library must still send, receive under a lock and
# complete, delete a queue, detect a duplicate (0.1, which had no history of
# message ids, refused a duplicate_detection_window: so does the library), run
# sbq_maintain() and show sbq_queue_stats (where that version has them), and a
# lock taken before the update must still settle after it.
# The update that moves dead letters to sbq.dead_letters must keep every one of
# them as it was, locks included (dlq_before_update, dlq_after_update).
# Needs PGHOST/PGPORT/PGUSER of a running server with sbqueue installed;
# scripts/test.sh runs it with sbqueue preloaded, as in production.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

current=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$root/sbqueue.control")
# the versions with a full install script, oldest first
mapfile -t versions < <(cd "$root/sql" && ls sbqueue--*.sql | grep -v -- '--.*--' |
    sed 's/sbqueue--\(.*\)\.sql/\1/' | sort -V)
oldest=${versions[0]}

psql() { command psql -X -q -v ON_ERROR_STOP=1 "$@"; }
# run one SQL command in database $1: its output (unaligned), or the first
# line of its error as "error: ..." (so a failing call is a failed check, not
# the end of the test)
try() {
    local out
    if out=$(psql -At -d "$1" -c "$2" 2>&1); then
        printf '%s' "$out"
    else
        printf 'error: %s' "$(printf '%s\n' "$out" | grep -m1 -E 'ERROR|FATAL|error' | sed 's/^.*\(ERROR\|FATAL\): *//')"
    fi
}
# whether the extension in database $1 has the function (regprocedure text) $2
has_function() {
    [ "$(psql -At -d "$1" -c "SELECT to_regprocedure('$2') IS NOT NULL")" = t ]
}
# whether the extension in database $1 has the relation $2
has_relation() {
    [ "$(psql -At -d "$1" -c "SELECT to_regclass('$2') IS NOT NULL")" = t ]
}
checks=0
failures=0
check() {
    checks=$((checks + 1))
    if [ "$2" = "$3" ]; then
        echo "ok $checks - $1"
    else
        failures=$((failures + 1))
        echo "not ok $checks - $1: expected '$3', got '$2'"
    fi
}

psql -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS sbq_upgrade_old" -c "DROP DATABASE IF EXISTS sbq_upgrade_new" \
    -c "CREATE DATABASE sbq_upgrade_old" -c "CREATE DATABASE sbq_upgrade_new"
psql -d sbq_upgrade_new -c "CREATE EXTENSION sbqueue"
psql -d sbq_upgrade_old -c "CREATE EXTENSION sbqueue VERSION '$oldest'"
psql -d sbq_upgrade_old -c "SELECT sbq_create_queue('kept')" \
    -c "SELECT sbq_send('kept', 'sent under $oldest')" >/dev/null
echo "installed $oldest; upgrading to $current"

# old_sql_checks VERSION: the current library with the SQL of VERSION, which
# is installed in sbq_upgrade_old (and not updated yet), on a queue of its own.
# Leaves in $held_token the token of a message received under VERSION and not
# settled, for after the update (empty when that receive failed).
held_token=
old_sql_checks() {
    local v=$1 db=sbq_upgrade_old q="lib-$1" got tok s1 s2
    got=$(try $db "SELECT count(*) FROM sbq_create_queue('$q')")
    check "$v: sbq_create_queue works with the current library" "$got" 1
    s1=$(try $db "SELECT sbq_send('$q', 'one under $v')")
    s2=$(try $db "SELECT sbq_send('$q', 'two under $v')")
    got="$s1, $s2"
    if [[ $s1 =~ ^[0-9]+$ && $s2 =~ ^[0-9]+$ ]] && [ "$s2" -gt "$s1" ]; then
        got="two increasing sequence numbers"
    fi
    check "$v: sbq_send works with the current library" "$got" "two increasing sequence numbers"

    # a peek-lock receive, then the complete of its token
    got=$(try $db "SELECT lock_token || ' ' || convert_from(body, 'UTF8') FROM sbq_receive('$q')")
    tok=
    if [[ $got =~ ^[0-9a-f-]{36}\ (.*)$ ]]; then
        tok=${got%% *}
        got=${BASH_REMATCH[1]}
    fi
    check "$v: a peek-lock sbq_receive returns the first message with a lock token" "$got" "one under $v"
    if has_relation $db sbq_queue_stats; then
        got=$(try $db "SELECT active_count + locked_count FROM sbq_queue_stats WHERE queue = '$q'")
        check "$v: sbq_queue_stats shows the queue's two messages" "$got" 2
        got=$(try $db "SELECT active_count || ' active, ' || locked_count || ' locked'
                         FROM sbq_queue_stats WHERE queue = '$q'")
        check "$v: sbq_queue_stats counts the received message as locked" "$got" "1 active, 1 locked"
    fi
    # before 0.5 a call ran with the caller's privileges: a receive and a renew
    # wrote the row, and needed UPDATE on sbq.messages. A lock kept in shared
    # memory writes none, and asks for it: a role that may only read the tables
    # took, renewed and dead-lettered every message. (In a database of its own:
    # the grants would leave the tables' privileges unlike a fresh install's.)
    if ! has_function $db 'sbq_grant(text,name,text[])'; then
        local pdb=sbq_upgrade_priv ptok
        psql -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $pdb" \
            -c "DROP ROLE IF EXISTS sbq_upgrade_reader" -c "CREATE DATABASE $pdb" -c "CREATE ROLE sbq_upgrade_reader"
        psql -d $pdb -c "CREATE EXTENSION sbqueue VERSION '$v'" -c "SELECT sbq_create_queue('p')" \
            -c "SELECT sbq_send('p', 'x')" -c "SELECT sbq_send('p', 'y')" \
            -c "GRANT USAGE ON SCHEMA sbq TO sbq_upgrade_reader" \
            -c "GRANT SELECT ON ALL TABLES IN SCHEMA sbq TO sbq_upgrade_reader" >/dev/null
        ptok=$(try $pdb "SELECT lock_token FROM sbq_receive('p')")
        got=$(try $pdb "SET ROLE sbq_upgrade_reader; SELECT count(*) FROM sbq_receive('p')")
        check "$v: a role that may only read the tables cannot receive under a lock" "$got" \
            "error: permission denied for table messages"
        got=$(try $pdb "SET ROLE sbq_upgrade_reader; SELECT sbq_renew('p', '$ptok'::uuid) IS NOT NULL")
        check "$v: ... nor renew a lock" "$got" "error: permission denied for table messages"
        # a dead letter's lock: the dead letters' own table from 0.4 on
        try $pdb "SELECT sbq_deadletter('p', lock_token) FROM sbq_receive('p')" >/dev/null
        local dlt=messages
        has_relation $pdb sbq.dead_letters && dlt=dead_letters
        got=$(try $pdb "SET ROLE sbq_upgrade_reader; SELECT count(*) FROM sbq_receive('p/\$deadletterqueue')")
        check "$v: ... nor lock a dead letter" "$got" "error: permission denied for table $dlt"
        psql -d postgres -c "DROP DATABASE $pdb" -c "DROP ROLE sbq_upgrade_reader"
    fi
    if [ -n "$tok" ]; then
        got=$(try $db "SELECT 'completed' FROM sbq_complete('$q', '$tok'::uuid)")
    else
        got="no lock token to complete"
    fi
    check "$v: sbq_complete of that token succeeds" "$got" completed
    got=$(try $db "SELECT count(*) || ' ' || string_agg(convert_from(body, 'UTF8'), ',') FROM sbq_peek('$q', 10)")
    check "$v: the completed message is gone, the other is still queued" "$got" "1 two under $v"

    # without sbq_maintain() (0.1) nothing would store counts kept in shared memory,
    # nor free the entries of its queues there: each call stores its counts, as 0.1 did
    if ! has_function $db 'sbq_maintain()'; then
        got=$(try $db "SELECT sent || ' sent, ' || completed || ' completed' FROM sbq_queue_stats WHERE queue = '$q'")
        check "$v: sbq_queue_stats shows the counts at once" "$got" "2 sent, 1 completed"
    fi

    # a copy that forwarding cannot deliver goes to the source's dead-letter sub-queue,
    # which before 0.4 is in sbq.messages (it failed on sbq.dead_letters)
    try $db "SELECT count(*) FROM sbq_create_queue('$q-to', max_message_size => 1024)" >/dev/null
    try $db "SELECT count(*) FROM sbq_create_queue('$q-fw')" >/dev/null
    try $db "SELECT count(*) FROM sbq_update_queue('$q-fw', forward_to => '$q-to')" >/dev/null
    got=$(try $db "SELECT sbq_send('$q-fw', repeat('x', 2000)) > 0")
    got="$got $(try $db "SELECT dead_letter_reason FROM sbq_peek('$q-fw/\$deadletterqueue', 5)")"
    check "$v: a message too large to forward is dead-lettered in its source queue" "$got" \
        "t MessageSizeExceededException"

    if has_function $db 'sbq_maintain()'; then
        got=$(try $db "SELECT sbq_maintain() ->> 'skipped'")
        check "$v: sbq_maintain() runs" "$got" false
    fi

    # sessions need the SQL of 0.7: the current library refuses them before it
    if ! has_function $db 'sbq_accept_session(text,text,interval)'; then
        got=$(try $db "SELECT count(*) FROM sbq_create_queue('$q-s', requires_session => true)")
        check "$v: a queue with sessions is refused until the update to 0.7" "$got" \
            "error: sessions need version 0.7 or later of extension sbqueue"
    fi

    # topics need the SQL of 0.10: the current library says so, and a topic
    # call on older SQL is no function at all
    if ! has_function $db 'sbq_create_topic(text,interval,interval,integer)'; then
        got=$(try $db "SELECT count(*) FROM sbq_send('no-such-topic', 'x')")
        check "$v: a send to a name that is neither queue nor topic is SB001" "$got" \
            'error: queue "no-such-topic" does not exist'
    fi

    # dead letters are forwarded from 0.11 on, which counts a message's hops in
    # its rows: the current library refuses the property before the update
    if [ "$(psql -At -d $db -c "SELECT count(*) FROM pg_catalog.pg_attribute
                                  WHERE attrelid = 'sbq.messages'::regclass AND attname = 'transfer_hops'")" = 0 ]; then
        got=$(try $db "SELECT count(*) FROM sbq_create_queue('$q-f', forward_dead_lettered_messages_to => '$q')")
        check "$v: forward_dead_lettered_messages_to is refused until the update to 0.11" "$got" \
            "error: forward_dead_lettered_messages_to needs version 0.11 or later of extension sbqueue"
    fi

    # the abandon of 0.9 takes a delay: with the three arguments of older SQL the
    # library abandons at once, as before (an absent delay is none)
    got=$(try $db "SELECT count(*) FROM sbq_create_queue('$q-a')")
    got=$(try $db "SELECT sbq_send('$q-a', 'abandoned under $v')")
    tok=$(try $db "SELECT lock_token FROM sbq_receive('$q-a')")
    got=$(try $db "SELECT 'abandoned' FROM sbq_abandon('$q-a', '$tok'::uuid, '{\"p\": 1}'::jsonb)")
    check "$v: sbq_abandon with properties works with the current library" "$got" abandoned
    got=$(try $db "SELECT delivery_count || ' ' || (application_properties ->> 'p')
                     FROM sbq_receive('$q-a')")
    check "$v: the abandoned message is received again at once, its properties merged" "$got" "2 1"

    # a queue deleted with the message it holds
    got=$(try $db "SELECT count(*) FROM sbq_create_queue('$q-del')")
    got=$(try $db "SELECT sbq_send('$q-del', 'deleted under $v') > 0")
    got=$(try $db "SELECT 'deleted' FROM sbq_delete_queue('$q-del')")
    check "$v: sbq_delete_queue works with the current library" "$got" deleted
    got=$(try $db "SELECT count(*) FROM sbq_queues WHERE queue = '$q-del'")
    check "$v: the deleted queue is gone" "$got" 0

    # duplicate detection keeps its history in sbq.duplicate_ids (0.2 on): a
    # message id sent twice within the window is stored once, and the second
    # send returns the first's sequence number (API.md); 0.1 refused a window,
    # and the current library refuses it with the SQL of 0.1
    if has_relation $db sbq.duplicate_ids; then
        got=$(try $db "SELECT count(*) FROM sbq_create_queue('$q-dup', duplicate_detection_window => '1 minute')")
        check "$v: a queue with duplicate detection" "$got" 1
        s1=$(try $db "SELECT sbq_send('$q-dup', 'first under $v', message_id => 'm1')")
        s2=$(try $db "SELECT sbq_send('$q-dup', 'again under $v', message_id => 'm1')")
        got="$s1, $s2"
        if [[ $s1 =~ ^[0-9]+$ ]] && [ "$s1" = "$s2" ]; then
            got="the first's sequence number"
        fi
        check "$v: a message id sent again returns the first's sequence number" "$got" "the first's sequence number"
        got=$(try $db "SELECT count(*) || ' ' || string_agg(convert_from(body, 'UTF8'), ',') FROM sbq_peek('$q-dup', 10)")
        check "$v: the duplicate stored nothing" "$got" "1 first under $v"
        got=$(try $db "SELECT 'deleted' FROM sbq_delete_queue('$q-dup')")
        check "$v: a queue with duplicate detection history is deleted" "$got" deleted
    else
        got=$(try $db "SELECT count(*) FROM sbq_create_queue('$q-dup', duplicate_detection_window => '1 minute')")
        check "$v: duplicate detection is refused until the update to 0.2, as 0.1 refused it" "$got" \
            "error: duplicate detection needs version 0.2 or later of extension sbqueue"
        got=$(try $db "SELECT count(*) FROM sbq_create_queue('$q-dup')")
        got=$(try $db "SELECT count(*) FROM sbq_update_queue('$q-dup', duplicate_detection_window => '1 minute')")
        check "$v: ... by sbq_update_queue too" "$got" \
            "error: duplicate detection needs version 0.2 or later of extension sbqueue"
        s1=$(try $db "SELECT sbq_send('$q-dup', 'first under $v', message_id => 'm1')")
        s2=$(try $db "SELECT sbq_send('$q-dup', 'again under $v', message_id => 'm1')")
        got=$(try $db "SELECT count(*) FROM sbq_peek('$q-dup', 10)")
        check "$v: without a window a message id sent twice is stored twice" "$got" 2
        # a window that a library before the refusal set: no message id is
        # taken until the update, rather than a duplicate stored
        psql -d $db -c "UPDATE sbq.queues SET duplicate_detection_window = '1 minute' WHERE name = '$q-dup'"
        got=$(try $db "SELECT sbq_send('$q-dup', 'again under $v', message_id => 'm1')")
        check "$v: a queue given a window anyway refuses a message id until the update" "$got" \
            "error: duplicate detection needs version 0.2 or later of extension sbqueue"
        got=$(try $db "SELECT sbq_send('$q-dup', 'no id under $v') > 0")
        check "$v: ... and takes a message without one" "$got" t
        got=$(try $db "SELECT 'deleted' FROM sbq_delete_queue('$q-dup')")
        check "$v: that queue is deleted" "$got" deleted
    fi

    # a lock taken before the update, settled after it
    got=$(try $db "SELECT lock_token || ' ' || convert_from(body, 'UTF8') FROM sbq_receive('$q')")
    held_token=
    if [[ $got =~ ^[0-9a-f-]{36}\ (.*)$ ]]; then
        held_token=${got%% *}
        got=${BASH_REMATCH[1]}
    fi
    check "$v: a message received before the update, its lock token kept" "$got" "two under $v"
}

# The version whose update moves the dead letters out of sbq.messages (subqueue 1)
# into a table of their own, sbq.dead_letters: before that update, dead letters
# made in several ways (and two held under locks) are recorded as
# the dead-letter sub-queue shows them; after it, they must show the same, be rows
# of sbq.dead_letters only, and the locks must still settle.
dlq_table_version=0.4
dlq_q=dlq-moved
dlq_addr="$dlq_q/\$deadletterqueue"
# every column of sbq_message but the lock token, in sequence order
dlq_cols="sequence_number, message_id, locked_until, delivery_count, enqueued_time,
    scheduled_enqueue_time, expires_at, time_to_live, state, session_id, correlation_id,
    subject, content_type, reply_to, reply_to_session_id, to_address, application_properties,
    body, dead_letter_reason, dead_letter_error_description, dead_letter_source"
dlq_lease_token=
dlq_row_token=
dlq_deferred_seq=
dlq_active_seq=
dlq_time_before=

# receive one message of address $2 in database $1 and leave its lock token (or
# "error: ...") in $got
dlq_receive_token() {
    got=$(try "$1" "SELECT lock_token FROM sbq_receive('$2')")
}

# dlq_before_update VERSION: dead letters in sbq.messages, made with the SQL of VERSION
dlq_before_update() {
    local v=$1 db=sbq_upgrade_old got tok
    got=$(try $db "SELECT count(*) FROM sbq_create_queue('$dlq_q', max_delivery_count => 2,
                       dead_lettering_on_message_expiration => true)")
    check "$v: a queue for dead letters" "$got" 1

    # deferred in the dead-letter sub-queue
    dlq_deferred_seq=$(try $db "SELECT sbq_send('$dlq_q', 'to defer'::text, message_id => 'deferred')")
    dlq_receive_token $db "$dlq_q"
    tok=$got
    got=$(try $db "SELECT 'dead-lettered' FROM sbq_deadletter('$dlq_q', '$tok'::uuid, 'ToDefer')")
    check "$v: a dead letter to defer" "$got" dead-lettered
    dlq_receive_token $db "$dlq_addr"
    tok=$got
    got=$(try $db "SELECT 'deferred' FROM sbq_defer('$dlq_addr', '$tok'::uuid, '{\"deferred\": true}')")
    check "$v: it is deferred in the dead-letter sub-queue" "$got" deferred

    # received from the dead-letter sub-queue, the lock held across the update: as a
    # lease (in shared memory, when sbqueue is preloaded), and stored in the row
    got=$(try $db "SELECT sbq_send('$dlq_q', 'held as a lease'::text, message_id => 'lease')")
    dlq_receive_token $db "$dlq_q"
    got=$(try $db "SELECT 'dead-lettered' FROM sbq_deadletter('$dlq_q', '$got'::uuid, 'ToHold')")
    check "$v: a dead letter to hold under a lease" "$got" dead-lettered
    dlq_receive_token $db "$dlq_addr"
    dlq_lease_token=$got
    check "$v: received from the dead-letter sub-queue, its lock (a lease, sbqueue being preloaded) held" \
        "$([[ $dlq_lease_token =~ ^[0-9a-f-]{36}$ ]] && echo token || echo "$dlq_lease_token")" token
    got=$(try $db "SELECT sbq_send('$dlq_q', 'held in the row'::text, message_id => 'row')")
    dlq_receive_token $db "$dlq_q"
    got=$(try $db "SELECT 'dead-lettered' FROM sbq_deadletter('$dlq_q', '$got'::uuid, 'ToHold')")
    check "$v: a dead letter to hold under a row lock" "$got" dead-lettered
    got=$(PGOPTIONS="-c sbqueue.memory_locks=off" try $db "SELECT lock_token FROM sbq_receive('$dlq_addr')")
    dlq_row_token=$got
    check "$v: received from the dead-letter sub-queue, its lock (in the row) held" \
        "$([[ $dlq_row_token =~ ^[0-9a-f-]{36}$ ]] && echo token || echo "$dlq_row_token")" token

    # explicitly, with a reason, a description and properties to modify
    got=$(try $db "SELECT sbq_send('$dlq_q', 'explicit'::text, message_id => 'explicit',
                       correlation_id => 'c1', subject => 'subject', content_type => 'text/plain',
                       reply_to => 'r', to_address => 't', time_to_live => '1 day',
                       application_properties => '{\"p\": \"old\", \"n\": 1}')")
    dlq_receive_token $db "$dlq_q"
    got=$(try $db "SELECT 'dead-lettered' FROM sbq_deadletter('$dlq_q', '$got'::uuid, 'BadData',
                       'field x missing', '{\"p\": \"new\", \"z\": null}')")
    check "$v: a dead letter by sbq_deadletter with reason, description and properties" "$got" dead-lettered

    # at max_delivery_count (2), by abandon
    got=$(try $db "SELECT sbq_send('$dlq_q', 'abandoned'::text, message_id => 'abandoned')")
    dlq_receive_token $db "$dlq_q"
    got=$(try $db "SELECT 'abandoned' FROM sbq_abandon('$dlq_q', '$got'::uuid, '{\"tries\": 1}')")
    dlq_receive_token $db "$dlq_q"
    got=$(try $db "SELECT 'abandoned' FROM sbq_abandon('$dlq_q', '$got'::uuid, '{\"tries\": 2}')")
    check "$v: the second abandon (max_delivery_count 2) succeeds" "$got" abandoned

    # time to live passed, found by maintenance
    got=$(try $db "SELECT sbq_send('$dlq_q', 'expired'::text, message_id => 'expired',
                       time_to_live => '100 milliseconds')")
    sleep 0.3
    got=$(try $db "SELECT (sbq_maintain() ->> 'expired_dead_lettered')::int >= 1")
    check "$v: sbq_maintain() dead-letters the expired message" "$got" t

    # and one message left in the queue itself
    dlq_active_seq=$(try $db "SELECT sbq_send('$dlq_q', 'active'::text, message_id => 'active')")

    got=$(try $db "SELECT string_agg(message_id || ':' || state || ':' || coalesce(dead_letter_reason, '-'), ' '
                                     ORDER BY sequence_number)
                     FROM sbq_peek('$dlq_addr', 100)")
    check "$v: the dead-letter sub-queue holds six dead letters" "$got" \
        "deferred:deferred:ToDefer lease:active:ToHold row:active:ToHold explicit:active:BadData abandoned:active:MaxDeliveryCountExceeded expired:active:TTLExpiredException"
    got=$(try $db "SELECT dead_letter_count FROM sbq_queue_stats WHERE queue = '$dlq_q'")
    check "$v: sbq_queue_stats counts six dead letters" "$got" 6
    psql -At -d $db -c "SELECT $dlq_cols FROM sbq_peek('$dlq_addr', 100) ORDER BY sequence_number" \
        >"$work/dlq_before.txt"
    dlq_time_before=$(psql -At -d $db -c "SELECT clock_timestamp()")
}

# dlq_after_update VERSION: the dead letters recorded before the update
dlq_after_update() {
    local v=$1 db=sbq_upgrade_old got date_after
    date_after=$(psql -At -d $db -c "SELECT clock_timestamp()")
    psql -At -d $db -c "SELECT $dlq_cols FROM sbq_peek('$dlq_addr', 100) ORDER BY sequence_number" \
        >"$work/dlq_after.txt"
    if diff -u "$work/dlq_before.txt" "$work/dlq_after.txt"; then
        got="the same $(wc -l <"$work/dlq_after.txt") dead letters"
    else
        got=different
    fi
    check "at $v the dead-letter sub-queue shows the same dead letters with the same properties" \
        "$got" "the same 6 dead letters"
    got=$(try $db "SELECT string_agg(d.sequence_number::text, ' ' ORDER BY d.sequence_number)
                     FROM sbq.dead_letters d JOIN sbq.queues q USING (queue_id) WHERE q.name = '$dlq_q'")
    check "at $v they are the rows of sbq.dead_letters" "$got" \
        "$(cut -d'|' -f1 "$work/dlq_before.txt" | paste -sd' ')"
    got=$(try $db "SELECT count(*) FROM sbq.messages WHERE subqueue = 1")
    check "at $v no dead letter is left in sbq.messages" "$got" 0
    got=$(try $db "SELECT string_agg(sequence_number::text, ' ') FROM sbq.messages m
                     JOIN sbq.queues q USING (queue_id) WHERE q.name = '$dlq_q'")
    check "at $v the queue's own message is still in sbq.messages" "$got" "$dlq_active_seq"
    got=$(try $db "SELECT count(DISTINCT dead_lettered_at) || ' ' ||
                          bool_and(dead_lettered_at BETWEEN '$dlq_time_before' AND '$date_after')
                     FROM sbq.dead_letters")
    check "at $v dead_lettered_at is the time of the update" "$got" "1 true"
    got=$(try $db "SELECT dead_letter_count || ' ' || (SELECT count(*) FROM sbq.dead_letters d
                          WHERE d.queue_id = (SELECT queue_id FROM sbq.queues WHERE name = '$dlq_q'))
                     FROM sbq_queue_stats WHERE queue = '$dlq_q'")
    check "at $v sbq_queue_stats counts the rows of sbq.dead_letters" "$got" "6 6"

    got=$(try $db "SELECT 'completed' FROM sbq_complete('$dlq_addr', '$dlq_lease_token'::uuid)")
    check "a dead letter's lock (a lease, sbqueue being preloaded) taken before the update to $v completes after it" "$got" completed
    got=$(PGOPTIONS="-c sbqueue.memory_locks=off" try $db "SELECT 'completed' FROM sbq_complete('$dlq_addr', '$dlq_row_token'::uuid)")
    check "a dead letter's lock (in the row) taken before the update to $v completes after it" "$got" completed
    got=$(try $db "SELECT message_id || ':' || state FROM sbq_receive_deferred('$dlq_addr', ARRAY[$dlq_deferred_seq::bigint])")
    check "at $v the dead letter deferred before the update is received by its sequence number" "$got" deferred:deferred
    got=$(try $db "SELECT dead_letter_count || ' ' || (SELECT count(*) FROM sbq.dead_letters d
                          WHERE d.queue_id = (SELECT queue_id FROM sbq.queues WHERE name = '$dlq_q'))
                     FROM sbq_queue_stats WHERE queue = '$dlq_q'")
    check "at $v, after two completes, sbq_queue_stats counts the rows of sbq.dead_letters" "$got" "4 4"
    got=$(try $db "SELECT sbq_resubmit('$dlq_q')")
    got="$got $(try $db "SELECT count(*) FROM sbq.messages m JOIN sbq.queues q USING (queue_id)
                          WHERE q.name = '$dlq_q'")"
    check "at $v the three dead letters not under a lock resubmit into sbq.messages" "$got" "3 4"
}

# The version whose library keeps session locks in shared memory (with the
# preload): a session held before its update, its lock in the session's row,
# must go on working after it, and no one else may take it meanwhile.
session_memory_version=0.8
sess_q=sess-kept
sess_token=
sess_msg_token=

# session_before_update VERSION: session S accepted and one message received under VERSION
session_before_update() {
    local v=$1 db=sbq_upgrade_old got
    got=$(try $db "SELECT count(*) FROM sbq_create_queue('$sess_q', requires_session => true)")
    check "$v: a queue with sessions" "$got" 1
    got=$(try $db "SELECT count(*) FROM (SELECT sbq_send('$sess_q', 'one', session_id => 'S'),
                                                sbq_send('$sess_q', 'two', session_id => 'S')) s")
    check "$v: two messages sent to session S" "$got" 1
    sess_token=$(try $db "SELECT session_token FROM sbq_accept_session('$sess_q', 'S')")
    got=$(try $db "SELECT lock_token || ' ' || convert_from(body, 'UTF8')
                     FROM sbq_receive_session('$sess_q', '$sess_token'::uuid, 1)")
    sess_msg_token=${got%% *}
    check "$v: session S accepted and its first message received" "${got#* }" one
}

# session_after_update VERSION: S, held since before the update to VERSION
session_after_update() {
    local v=$1 db=sbq_upgrade_old got
    got=$(try $db "SELECT count(*) FROM sbq_accept_session('$sess_q', 'S')")
    check "at $v session S, held since before the update, cannot be accepted by another" "$got" \
        "error: session \"S\" of queue \"$sess_q\" cannot be locked"
    got=$(try $db "SELECT 'completed' FROM sbq_complete('$sess_q', '$sess_msg_token'::uuid)")
    check "at $v its message received before the update completes" "$got" completed
    got=$(try $db "SELECT convert_from(body, 'UTF8') || ' ' || delivery_count
                     FROM sbq_receive_session('$sess_q', '$sess_token'::uuid, 5)")
    check "at $v its holder receives its next message" "$got" "two 1"
    got=$(try $db "SELECT 'released' FROM sbq_release_session('$sess_q', '$sess_token'::uuid)")
    check "at $v its holder releases it" "$got" released
    got=$(try $db "SELECT convert_from(m.body, 'UTF8') || ' ' || m.delivery_count
                     FROM sbq_accept_session('$sess_q') a,
                          LATERAL sbq_receive_session('$sess_q', a.session_token) m")
    check "at $v it is accepted again, the released delivery not counted" "$got" "two 1"
    if [[ $(psql -At -d postgres -c "SHOW shared_preload_libraries") == *sbqueue* ]]; then
        got=$(psql -At -d $db -c "SELECT sbq_send('$sess_q', 'three', session_id => 'T')" \
                  -c "BEGIN" -c "SELECT count(*) FROM sbq_accept_session('$sess_q')" \
                  -c "SELECT txid_current_if_assigned() IS NULL" -c "COMMIT" | tail -1)
        check "at $v, preloaded, accepting the next session assigns no transaction id" "$got" t
    fi
}

step=$oldest
while [ "$step" != "$current" ]; do
    next=$(cd "$root/sql" && ls "sbqueue--$step--"*.sql 2>/dev/null | sed "s/sbqueue--$step--\(.*\)\.sql/\1/" | sort -V | tail -1)
    if [ -z "$next" ]; then
        echo "not ok - no upgrade script from $step"
        exit 1
    fi
    old_sql_checks "$step"
    if [ "$next" = "$dlq_table_version" ]; then
        dlq_before_update "$step"
    fi
    if [ "$next" = "$session_memory_version" ]; then
        session_before_update "$step"
    fi
    psql -d sbq_upgrade_old -c "ALTER EXTENSION sbqueue UPDATE TO '$next'"
    got=$(psql -At -d sbq_upgrade_old -c "SELECT extversion FROM pg_extension WHERE extname = 'sbqueue'")
    check "upgraded from $step to $next" "$got" "$next"
    got=$(psql -At -d sbq_upgrade_old -c "SELECT count(*) FROM sbq_peek('kept', 10)")
    check "the message sent under $oldest is still queued at $next" "$got" "1"
    if [ -n "$held_token" ]; then
        got=$(try sbq_upgrade_old "SELECT 'completed' FROM sbq_complete('lib-$step', '$held_token'::uuid)")
    else
        got="no lock token from $step"
    fi
    check "a lock taken under $step completes after the update to $next" "$got" completed
    got=$(try sbq_upgrade_old "SELECT count(*) FROM sbq_peek('lib-$step', 10)")
    check "nothing is left in the queue used under $step at $next" "$got" 0
    if [ "$next" = "$dlq_table_version" ]; then
        dlq_after_update "$next"
    fi
    if [ "$next" = "$session_memory_version" ]; then
        session_after_update "$next"
    fi
    step=$next
done

psql -d sbq_upgrade_new -f "$here/describe.sql" >"$work/fresh.txt"
psql -d sbq_upgrade_old -f "$here/describe.sql" >"$work/upgraded.txt"
if diff -u "$work/fresh.txt" "$work/upgraded.txt" >"$work/diff.txt"; then
    check "the upgraded extension matches a fresh install ($(wc -l <"$work/fresh.txt") lines of definitions)" same same
else
    cat "$work/diff.txt"
    check "the upgraded extension matches a fresh install" different same
fi

got=$(psql -At -d sbq_upgrade_old -c "SELECT convert_from(body, 'UTF8') FROM sbq_receive('kept', 5, receive_mode => 'receive_and_delete')")
check "the upgraded extension receives the old message" "$got" "sent under $oldest"
got=$(psql -At -d sbq_upgrade_old -c "SELECT (sbq_maintain() ->> 'skipped')")
check "functions added by the upgrade work" "$got" "false"
# 0.7 has sessions: a session queue made after the update works end to end
if has_function sbq_upgrade_old 'sbq_accept_session(text,text,interval)'; then
    got=$(try sbq_upgrade_old "SELECT requires_session FROM sbq_create_queue('sq', requires_session => true)")
    check "after the update to 0.7 a queue with sessions can be created" "$got" t
    got=$(try sbq_upgrade_old "SELECT sbq_send('sq', 'in a session', session_id => 's1') > 0")
    check "after the update to 0.7 a message is sent to a session" "$got" t
    got=$(try sbq_upgrade_old "SELECT convert_from(m.body, 'UTF8') FROM sbq_accept_session('sq') a,
        LATERAL sbq_receive_session('sq', a.session_token) m")
    check "after the update to 0.7 the next session is accepted and its message received" "$got" "in a session"
fi
# 0.10 has topics: a topic made after the update fans out to its subscriptions
if has_function sbq_upgrade_old 'sbq_create_topic(text,interval,interval,integer)'; then
    got=$(try sbq_upgrade_old "SELECT count(*) FROM sbq_create_topic('t') x, sbq_create_subscription('t', 'a') y,
                                   sbq_create_subscription('t', 'b') z")
    check "after the update to 0.10 a topic with two subscriptions can be created" "$got" 1
    got=$(try sbq_upgrade_old "SELECT sbq_send('t', 'to both') > 0")
    check "after the update to 0.10 a message is sent to the topic" "$got" t
    got=$(try sbq_upgrade_old "SELECT string_agg(convert_from(m.body, 'UTF8'), ',')
        FROM unnest(ARRAY['t/subscriptions/a', 't/subscriptions/b']) s,
             LATERAL sbq_receive(s, 1, receive_mode => 'receive_and_delete') m")
    check "after the update to 0.10 each subscription has its copy" "$got" "to both,to both"
    got=$(try sbq_upgrade_old "SELECT sent || ' ' || dropped FROM sbq_topic_stats WHERE topic = 't'")
    check "after the update to 0.10 the topic's stats count the send" "$got" "1 0"
fi
# 0.11 forwards dead letters: a queue's dead letter reaches its destination
if [ "$(try sbq_upgrade_old "SELECT count(*) FROM pg_catalog.pg_attribute
                               WHERE attrelid = 'sbq.messages'::regclass AND attname = 'transfer_hops'")" = 1 ]; then
    got=$(try sbq_upgrade_old "SELECT count(*) FROM sbq_create_queue('dlq-to') a,
                                   sbq_create_queue('dlq-from', forward_dead_lettered_messages_to => 'dlq-to') b")
    check "after the update to 0.11 a queue forwards its dead letters" "$got" 1
    got=$(try sbq_upgrade_old "SELECT sbq_send('dlq-from', 'dead') > 0")
    got=$(try sbq_upgrade_old "SELECT count(sbq_deadletter('dlq-from', lock_token, 'Why')) FROM sbq_receive('dlq-from')")
    got=$(try sbq_upgrade_old "SELECT sbq_maintain() ->> 'dead_letters_forwarded'")
    check "after the update to 0.11 maintenance forwards a dead letter" "$got" 1
    got=$(try sbq_upgrade_old "SELECT convert_from(body, 'UTF8') || ' ' || dead_letter_reason || ' ' || dead_letter_source
                                 FROM sbq_receive('dlq-to')")
    check "after the update to 0.11 it is received from the destination with its reason and source" "$got" "dead Why dlq-from"
else
    check "the update reaches 0.11 (sbq.messages has transfer_hops)" missing present
fi
# 0.12 has metrics: the view counts what the upgraded database holds
if has_relation sbq_upgrade_old sbq_metrics; then
    got=$(try sbq_upgrade_old "SELECT value FROM sbq_metrics WHERE metric = 'sbq_messages'
                                 AND queue = 'dlq-to' AND state = 'active'")
    check "after the update to 0.12 sbq_metrics counts a queue's messages" "$got" 0
    got=$(try sbq_upgrade_old "SELECT sbq_metrics_text() ~ '(^|\n)sbq_topic_sent_total\{database=\"sbq_upgrade_old\",topic=\"t\"\} 1\n'")
    check "after the update to 0.12 sbq_metrics_text() shows the topic's send" "$got" t
else
    check "the update reaches 0.12 (sbq_metrics)" missing present
fi
# 0.13 places entities by a key: the same for any letter case and sub-queue, and
# the single-server layout is untouched (no entity_key column until sbq_distribute)
if has_function sbq_upgrade_old "sbq.entity_key(text)"; then
    got=$(try sbq_upgrade_old "SELECT sbq.entity_key('Orders') = sbq.entity_key('orders/\$deadletterqueue')
                                  AND sbq.entity_key('T/Subscriptions/S') = sbq.entity_key('t')
                                  AND sbq.entity_key('orders') <> sbq.entity_key('t')")
    check "after the update to 0.13 sbq.entity_key places a queue with its dead letters, a topic with its subscriptions" "$got" t
    got=$(try sbq_upgrade_old "SELECT count(*) FROM pg_attribute WHERE attname = 'entity_key'
                                  AND attrelid = 'sbq.messages'::regclass")
    check "after the update to 0.13 the tables keep the single-server layout" "$got" 0
    got=$(try sbq_upgrade_old "SELECT sbq_distribute()")
    check "after the update to 0.13 sbq_distribute() without Citus says what it needs" "$got" \
        "error: sbq_distribute() needs the extension citus in this database"
else
    check "the update reaches 0.13 (sbq.entity_key)" missing present
fi
# 0.14 defines each view as a node view, shown through the public one: on one
# server the same rows as before, and the node views out of PUBLIC's reach
if has_relation sbq_upgrade_old sbq.node_queue_stats; then
    got=$(try sbq_upgrade_old "SELECT count(*) FROM sbq_queue_stats s JOIN sbq.node_queue_stats n USING (queue)
                                WHERE (s.*)::text = (n.*)::text AND s.sent > 0")
    check "after the update to 0.14 sbq_queue_stats shows its node view's rows" "$([ "${got:-0}" -gt 0 ] 2>/dev/null && echo rows || echo "$got")" rows
    got=$(try sbq_upgrade_old "SELECT count(*) FROM sbq.cluster_view('queues') AS v(queue text) ")
    check "after the update to 0.14 sbq.cluster_view() refuses columns that are not its node view's" \
        "$got" "error: the columns asked for are not those of the node view"
    got=$(try sbq_upgrade_old "SELECT count(*) FROM sbq.cluster_view('messages') AS v(queue text) ")
    check "after the update to 0.14 sbq.cluster_view() shows only sbqueue's views" \
        "$got" "error: \"messages\" is not a view of sbqueue"
    got=$(try sbq_upgrade_old "SELECT has_table_privilege('public', 'sbq.node_queues', 'SELECT')")
    check "after the update to 0.14 PUBLIC cannot read a node view" "$got" f
else
    check "the update reaches 0.14 (sbq.node_queue_stats)" missing present
fi
# 0.15 shows how full the table of queues in shared memory is, in sbq_metrics too
if has_function sbq_upgrade_old "sbq_queue_table()"; then
    got=$(try sbq_upgrade_old "SELECT (SELECT count(*) FROM sbq_metrics WHERE metric LIKE 'sbq\_queue\_table\_%')
                                || ' ' || (SELECT count(*) FROM sbq_metrics WHERE metric LIKE 'sbq\_lock\_table\_%')")
    check "after the update to 0.15 sbq_metrics has the five rows of the table of queues beside the lock table's four" "$got" "5 4"
    got=$(try sbq_upgrade_old "SELECT has_function_privilege('public', 'sbq_queue_table()', 'EXECUTE')")
    check "after the update to 0.15 PUBLIC may call sbq_queue_table()" "$got" t
else
    check "the update reaches 0.15 (sbq_queue_table())" missing present
fi
# 0.6 shows the maintenance workers of the server; with the preload the
# database is listed from the commit of its CREATE EXTENSION on
if has_relation sbq_upgrade_old sbq_maintenance_status &&
    [[ $(psql -At -d postgres -c "SHOW shared_preload_libraries") == *sbqueue* ]]; then
    got=$(try sbq_upgrade_old "SELECT state FROM sbq_maintenance_status WHERE database = current_database()")
    check "sbq_maintenance_status, added by the upgrade, lists the upgraded database" "$got" installed
fi

# From 0.8 to 0.9, sbq_abandon, sbq_create_queue and sbq_update_queue are made
# again: the update names what an administrator must grant or revoke again,
# PUBLIC included (in a database of its own: its grants differ from a fresh install's).
if [ -f "$root/sql/sbqueue--0.8--0.9.sql" ]; then
    db=sbq_upgrade_grants
    psql -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db" \
        -c "DROP ROLE IF EXISTS sbq_upgrade_admin" -c "CREATE ROLE sbq_upgrade_admin" \
        -c "CREATE DATABASE $db" >/dev/null
    psql -d $db -c "CREATE EXTENSION sbqueue VERSION '0.8'" \
        -c "GRANT EXECUTE ON FUNCTION sbq_create_queue(text, interval, integer, interval, boolean, interval, boolean, text, text, integer, interval) TO sbq_upgrade_admin, PUBLIC" \
        -c "REVOKE EXECUTE ON FUNCTION sbq_update_queue(text, interval, integer, interval, boolean, interval, boolean, text, text, integer, interval) FROM PUBLIC" \
        -c "REVOKE EXECUTE ON FUNCTION sbq_abandon(text, uuid, jsonb) FROM PUBLIC" >/dev/null
    out=$(psql -d $db -c "ALTER EXTENSION sbqueue UPDATE TO '0.9'" 2>&1)
    got=$(echo "$out" | grep -c "replaces sbq_create_queue(): grant EXECUTE on it to sbq_upgrade_admin again" || true)
    check "the update to 0.9 names a role granted EXECUTE on sbq_create_queue" "$got" 1
    got=$(echo "$out" | grep -c "replaces sbq_create_queue(): PUBLIC had EXECUTE on it and has not now" || true)
    check "... and PUBLIC, which had EXECUTE on sbq_create_queue" "$got" 1
    got=$(echo "$out" | grep -c "replaces sbq_update_queue(): PUBLIC had no EXECUTE on it and has now" || true)
    check "... and PUBLIC, which had no EXECUTE on sbq_update_queue" "$got" 1
    got=$(echo "$out" | grep -c "replaces sbq_abandon(): PUBLIC had no EXECUTE on it and has now" || true)
    check "... and on sbq_abandon" "$got" 1
    psql -d postgres -c "DROP DATABASE $db" -c "DROP ROLE sbq_upgrade_admin" >/dev/null
fi

# From 0.3 to 0.4, dead letters move to a table of their own. The functions
# run with their caller's rights: an application role with the rights 0.3's
# README gives it must go on working the dead letters after the update (in a
# database of its own: its grants would differ from a fresh install's).
if [ -f "$root/sql/sbqueue--0.3--0.4.sql" ]; then
    db=sbq_upgrade_app
    psql -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db" \
        -c "DROP ROLE IF EXISTS sbq_upgrade_app" -c "CREATE ROLE sbq_upgrade_app LOGIN" \
        -c "CREATE DATABASE $db"
    psql -d $db -c "CREATE EXTENSION sbqueue VERSION '0.3'" \
        -c "GRANT USAGE ON SCHEMA sbq TO sbq_upgrade_app" \
        -c "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA sbq TO sbq_upgrade_app" \
        -c "GRANT USAGE ON ALL SEQUENCES IN SCHEMA sbq TO sbq_upgrade_app" \
        -c "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA sbq TO sbq_upgrade_app" \
        -c "SELECT sbq_create_queue('app-q', max_delivery_count => 1)" >/dev/null
    got=$(PGUSER=sbq_upgrade_app try $db "SELECT sbq_send('app-q', 'app') > 0")
    check "0.3: an application role with the README's rights sends" "$got" t
    got=$(psql -d $db -c "ALTER EXTENSION sbqueue UPDATE TO '0.4'" 2>&1 | grep -c "granted on sbq.dead_letters")
    check "the update to 0.4 says what it granted on sbq.dead_letters" "$got" 1
    tok=$(PGUSER=sbq_upgrade_app try $db "SELECT lock_token FROM sbq_receive('app-q')")
    got=$(PGUSER=sbq_upgrade_app try $db "SELECT 'abandoned' FROM sbq_abandon('app-q', '$tok'::uuid)")
    check "at 0.4 the application role's abandon on the last delivery dead-letters" "$got" abandoned
    got=$(PGUSER=sbq_upgrade_app try $db "SELECT count(*) FROM sbq_peek('app-q/\$deadletterqueue')")
    check "at 0.4 the application role peeks the dead letter" "$got" 1
    tok=$(PGUSER=sbq_upgrade_app try $db "SELECT lock_token FROM sbq_receive('app-q/\$deadletterqueue')")
    got=$(PGUSER=sbq_upgrade_app try $db "SELECT 'completed' FROM sbq_complete('app-q/\$deadletterqueue', '$tok'::uuid)")
    check "at 0.4 the application role receives and completes the dead letter" "$got" completed

    # From 0.4 to 0.5, the calls run as the owner of the tables and check queue
    # rights: the role's privileges on schema sbq become rights on every queue,
    # and go.
    if [ -f "$root/sql/sbqueue--0.4--0.5.sql" ]; then
        got=$(PGUSER=sbq_upgrade_app try $db "SELECT sbq_send('app-q', 'before 0.5') > 0")
        check "0.4: the application role sends" "$got" t
        # privileges besides the recipe's: on other tables, a column, with the
        # grant option passed on, and default privileges in schema sbq
        psql -d postgres -c "SET client_min_messages = warning" \
            -c "DROP ROLE IF EXISTS sbq_upgrade_mon" -c "DROP ROLE IF EXISTS sbq_upgrade_lead" \
            -c "CREATE ROLE sbq_upgrade_mon" -c "CREATE ROLE sbq_upgrade_lead" >/dev/null
        psql -d $db -c "GRANT USAGE ON SCHEMA sbq TO sbq_upgrade_mon, sbq_upgrade_lead" \
            -c "GRANT SELECT ON sbq.dead_letters TO sbq_upgrade_mon" \
            -c "GRANT SELECT (body) ON sbq.messages TO sbq_upgrade_mon" \
            -c "GRANT SELECT ON ALL TABLES IN SCHEMA sbq TO sbq_upgrade_lead WITH GRANT OPTION" \
            -c "SET ROLE sbq_upgrade_lead" -c "GRANT SELECT ON sbq.queues TO sbq_upgrade_mon" \
            -c "RESET ROLE" \
            -c "ALTER DEFAULT PRIVILEGES IN SCHEMA sbq GRANT SELECT ON TABLES TO sbq_upgrade_mon" \
            -c "GRANT INSERT, UPDATE, DELETE ON sbq_queues, sbq_queue_stats TO sbq_upgrade_mon" \
            >/dev/null
        got=$(psql -d $db -c "ALTER EXTENSION sbqueue UPDATE TO '0.5'" 2>&1 |
            grep -c 'gave sbq_upgrade_app the rights {send,listen} on every queue')
        check "the update to 0.5 says which rights it gave the application role" "$got" 1
        got=$(psql -At -d $db -c "SELECT rights FROM sbq_rights WHERE entity = 'app-q' AND role = 'sbq_upgrade_app'")
        check "at 0.5 the application role holds send and listen on the queue" "$got" "{send,listen}"
        tok=$(PGUSER=sbq_upgrade_app try $db "SELECT lock_token FROM sbq_receive('app-q')")
        got=$(PGUSER=sbq_upgrade_app try $db "SELECT 'completed' FROM sbq_complete('app-q', '$tok'::uuid)")
        check "at 0.5 the application role receives and completes the message sent at 0.4" "$got" completed
        got=$(PGUSER=sbq_upgrade_app try $db "SELECT count(*) FROM sbq.messages")
        check "at 0.5 the application role can no longer read the message table" "$got" \
            "error: permission denied for schema sbq"
        got=$(psql -At -d $db -c "SELECT count(*) FROM pg_class c, aclexplode(c.relacl) a
                                    WHERE c.relnamespace = 'sbq'::regnamespace
                                      AND a.grantee = 'sbq_upgrade_app'::regrole")
        check "at 0.5 the application role holds no privilege on the tables of sbq" "$got" 0
        got=$(psql -At -d $db -c "SELECT count(*) FROM (
                SELECT a.grantee, c.relowner AS owner FROM pg_class c, aclexplode(c.relacl) a
                 WHERE c.relnamespace = 'sbq'::regnamespace
                   AND c.oid <> 'sbq.queue_rights'::regclass  -- the empty marker PUBLIC reads
                UNION ALL
                SELECT a.grantee, c.relowner FROM pg_class c JOIN pg_attribute t ON t.attrelid = c.oid,
                       aclexplode(t.attacl) a WHERE c.relnamespace = 'sbq'::regnamespace
                UNION ALL
                SELECT a.grantee, n.nspowner FROM pg_namespace n, aclexplode(n.nspacl) a
                 WHERE n.nspname = 'sbq'
                UNION ALL
                SELECT a.grantee, p.proowner FROM pg_proc p, aclexplode(p.proacl) a
                 WHERE p.pronamespace = 'sbq'::regnamespace AND a.grantee <> 0
                UNION ALL
                SELECT a.grantee, 0 FROM pg_default_acl d, aclexplode(d.defaclacl) a
                 WHERE d.defaclnamespace = 'sbq'::regnamespace) x
               WHERE x.grantee <> x.owner")
        check "at 0.5 nobody but the owner holds a privilege on schema sbq or in it (other tables, columns, grant options passed on, default privileges)" "$got" 0
        got=$(psql -At -d $db -c "SELECT count(*) FROM pg_class c, aclexplode(c.relacl) a
               WHERE c.relname IN ('sbq_queues', 'sbq_queue_stats', 'sbq_rights') AND c.relkind = 'v'
                 AND a.grantee <> c.relowner AND NOT (a.grantee = 0 AND a.privilege_type = 'SELECT')")
        check "at 0.5 the views grant PUBLIC SELECT and nobody anything else (a role could write through them)" "$got" 0
        psql -d $db -c "SELECT sbq_create_queue('app-q2')" >/dev/null
        got=$(PGUSER=sbq_upgrade_app try $db "SELECT sbq_send('app-q2', 'x')")
        check "at 0.5 a queue created after the update needs a grant" "$got" \
            'error: permission denied for queue "app-q2"'
        got=$(try postgres "DROP ROLE sbq_upgrade_app")
        check "at 0.5 a role the update gave rights cannot be dropped" "$got" \
            'error: role "sbq_upgrade_app" cannot be dropped because some objects depend on it'
    fi
    psql -d postgres -c "DROP DATABASE $db" -c "DROP ROLE sbq_upgrade_app" \
        -c "DROP ROLE IF EXISTS sbq_upgrade_mon" -c "DROP ROLE IF EXISTS sbq_upgrade_lead"
fi

# an update to 0.3 not yet committed, whose transaction receives: the other sessions
# still run the SQL of 0.2, which sees only locks stored in rows, so the receive of the
# updating transaction stores its lock there (it took a lock in shared memory, and a
# consumer of 0.2 took the same message as well)
db=sbq_upgrade_open
psql -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
psql -d $db -c "CREATE EXTENSION sbqueue VERSION '0.2'" -c "SELECT sbq_create_queue('q')" \
    -c "SELECT sbq_send('q', 'only')" >/dev/null
PGAPPNAME=sbq_updater psql -At -d $db -c "BEGIN" -c "ALTER EXTENSION sbqueue UPDATE TO '0.3'" \
    -c "SELECT count(*) FROM sbq_receive('q')" -c "SELECT pg_sleep(2)" -c "COMMIT" >"$work/updater.out" 2>&1 &
updater=$!
for _ in $(seq 1 100); do
    [ "$(psql -At -d $db -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'sbq_updater'
                              AND query LIKE '%pg_sleep%' AND wait_event = 'PgSleep'")" = 1 ] && break
    sleep 0.1
done
got=$(try $db "SELECT count(*) FROM sbq_receive('q')")
wait $updater
check "a consumer of 0.2 beside an open update to 0.3 that received the message gets nothing" \
    "$got|$(grep -v -E '^(BEGIN|ALTER EXTENSION|COMMIT)?$' "$work/updater.out" | tr '\n' ' ')" "0|1 "
psql -d postgres -c "DROP DATABASE $db" >/dev/null

psql -d postgres -c "DROP DATABASE sbq_upgrade_old" -c "DROP DATABASE sbq_upgrade_new"
echo "$((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
