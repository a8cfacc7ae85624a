#!/usr/bin/env python3
"""Writes the seed corpora under tests/fuzz/corpus/<name>/ from readable sources.

    python3 tests/fuzz/make_seeds.py      (rewrites every seed; other files are left alone)

Sources: the bytes PyTorch 1.13.1 put on the wire (docs/PROTOCOL.md §1.6), the 2.x
handshake (VALIDATE 0x3C85F7CE, then PING(pid)), the hostlists of docs/SLURM.md §4.2 and the
inputs that broke other parsers, torchrun's two error-file formats (torch_protocol.md §3.5), and
the etcd v3 JSON gateway's responses (docs/ETCD.md, etcd 3.4.23).
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def unhex(text):
    return bytes.fromhex(text.replace(" ", "").replace("|", ""))


def write(target, name, data):
    folder = os.path.join(HERE, "corpus", target)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


# ---- wire encoding, both dialects -------------------------------------------------------------
LEGACY = {"SET": 0, "COMPARE_SET": 1, "GET": 2, "ADD": 3, "CHECK": 4, "WAIT": 5, "GETNUMKEYS": 6,
          "WATCH_KEY": 7, "DELETE_KEY": 8}
CURRENT = {"VALIDATE": 0, "SET": 1, "COMPARE_SET": 2, "GET": 3, "ADD": 4, "CHECK": 5, "WAIT": 6,
           "GETNUMKEYS": 7, "DELETE_KEY": 8, "APPEND": 9, "MULTI_GET": 10, "MULTI_SET": 11,
           "CANCEL_WAIT": 12, "PING": 13, "QUEUE_PUSH": 14, "QUEUE_POP": 15, "QUEUE_LEN": 16}
MAGIC = 0x3C85F7CE


def s(b):
    if isinstance(b, str):
        b = b.encode()
    return struct.pack("<Q", len(b)) + b


def req(dialect, op, *fields):
    table = LEGACY if dialect == "legacy" else CURRENT
    out = bytes([table[op]])
    for f in fields:
        out += f
    return out


def keys(*ks):
    return struct.pack("<Q", len(ks)) + b"".join(s(k) for k in ks)


def i64(v):
    return struct.pack("<q", v)


def u32(v):
    return struct.pack("<I", v)


def handshake(pid=4242):
    return req("current", "VALIDATE", u32(MAGIC)) + req("current", "PING", u32(pid))


# ---- fuzz_codec: raw client streams -----------------------------------------------------------
CAPTURED_113 = {  # docs/PROTOCOL.md §1.6, client to server
    "add_init": "03 0500000000000000 696e69742f 0100000000000000",
    "set": "00 | 0200000000000000 2f6b 0200000000000000 7631",
    "wait": "05 0100000000000000 0200000000000000 2f6b",
    "get": "02 | 0200000000000000 2f6b",
    "add_5": "03 | 0400000000000000 2f636e74 0500000000000000",
    "add_minus_2": "03 0400000000000000 2f636e74 feffffffffffffff",
    "cas_ok": "01 0200000000000000 2f6b 0200000000000000 7631 0200000000000000 7632",
    "cas_miss": "01 | 0200000000000000 2f6b 0200000000000000 7a7a 0200000000000000 7633",
    "cas_nokey": "01 | 0600000000000000 2f6e6f6b6579 0300000000000000 657870 0300000000000000 646573",
    "cas_nokey2": "01 0700000000000000 2f6e6f6b657932 0000000000000000 0300000000000000 646573",
    "wait_2": "05 | 0200000000000000 0200000000000000 2f6b 0400000000000000 2f636e74",
    "numkeys": "06",
    "delete": "08 0200000000000000 2f6b",
    "late_wait": "05 0100000000000000 0500000000000000 2f6c617465",
    "prefix_set": "00 1400000000000000 2f2f776f726b65722f617474656d70745f302f78 0100000000000000 31",
    "timeout_wait": "05 0100000000000000 0600000000000000 2f6e65766572",
    "watch": "07 0200000000000000 2f77",
}


def codec_seeds():
    for name, text in CAPTURED_113.items():
        write("codec", "torch113_" + name, unhex(text))
    order = ["add_init", "set", "wait", "get", "add_5", "add_minus_2", "cas_ok", "cas_miss",
             "cas_nokey", "cas_nokey2", "wait_2", "numkeys", "delete", "delete"]
    write("codec", "torch113_session", b"".join(unhex(CAPTURED_113[n]) for n in order))
    write("codec", "torch113_pipelined_numkeys", unhex("06 06"))
    write("codec", "torch113_raw_check", req("legacy", "CHECK", keys("/a", "/zz")))

    write("codec", "torch2_handshake", handshake())
    c = "current"
    session = handshake(31337) + b"".join([
        req(c, "ADD", s("init/"), i64(1)),
        req(c, "SET", s("/k"), s("v1")),
        req(c, "WAIT", keys("/k")),
        req(c, "GET", s("/k")),
        req(c, "COMPARE_SET", s("/k"), s("v1"), s("v2")),
        req(c, "CHECK", keys("/k", "/zz")),
        req(c, "GETNUMKEYS"),
        req(c, "DELETE_KEY", s("/k")),
        req(c, "APPEND", s("/log"), s("a")),
        req(c, "MULTI_SET", struct.pack("<Q", 2), s("/x"), s("1"), s("/y"), s("2")),
        req(c, "MULTI_GET", keys("/x", "/y")),
        req(c, "WAIT", keys("/never")),
        req(c, "CANCEL_WAIT"),
        req(c, "QUEUE_PUSH", s("q"), s("item")),
        req(c, "QUEUE_LEN", s("q")),
        req(c, "QUEUE_POP", s("q")),
    ])
    write("codec", "torch2_session", session)
    write("codec", "torch2_bad_magic", req(c, "VALIDATE", u32(0xDEADBEEF)))
    # Lengths over every limit: must be rejected from the length field alone.
    write("codec", "huge_key_length", b"\x00" + struct.pack("<Q", 1 << 40) + b"k")
    write("codec", "huge_value_length", b"\x00" + s("k") + struct.pack("<Q", (1 << 64) - 1))
    write("codec", "huge_key_count", b"\x05" + struct.pack("<Q", 1 << 32))
    # What a 1.13 server reads when a 2.x client probes it with VALIDATE: a SET with a ~1 GB key.
    write("codec", "validate_read_as_legacy", handshake()[:5])


# ---- fuzz_server: conversations -----------------------------------------------------------------
# Records: header = slot + 4 * kind; kind 0 raw bytes (then a length byte), 36 a synthesized
# request (4 selector bytes), 50 the same as a tagged write (then a client<<4|request byte), 54
# close, 56 the token handshake, 58 raw bytes one at a time (then a length byte), 62 raw bytes
# repeated 1 + 16 * n times (then n, then a length byte).
RAW, REQUEST, TAGGED, CLOSE, AUTH, BYTEWISE, REPEATED = 0, 36, 50, 54, 56, 58, 62


def raw(slot, data, kind=RAW):
    out = b""
    while True:  # records carry at most 255 bytes
        chunk, data = data[:255], data[255:]
        out += bytes([slot + 4 * kind, len(chunk)]) + chunk
        if not data:
            return out


def s_len_prefixed(data):
    return bytes([len(data)]) + data


def close(slot):
    return bytes([slot + 4 * CLOSE])


def config(max_waiters_sel=0, tight=False, request_bytes_sel=3, must_auth=False, token=False):
    return bytes([max_waiters_sel | (4 if tight else 0) | (request_bytes_sel << 3) |
                  (0x20 if must_auth else 0) | (0x40 if token else 0)])


def tagged(client, request, data):
    return b"\x40" + struct.pack("<QQ", client, request) + data


def server_seeds():
    L, C = "legacy", "current"
    # The captured 1.13 conversation, the SET split across two segments as the client sent it.
    conv = config()
    for name in ["add_init"]:
        conv += raw(0, unhex(CAPTURED_113[name]))
    conv += raw(0, b"\x00") + raw(0, unhex(CAPTURED_113["set"])[1:])
    for name in ["wait", "get", "add_5", "add_minus_2", "cas_ok", "cas_miss", "cas_nokey",
                 "cas_nokey2", "wait_2", "numkeys", "delete", "delete"]:
        conv += raw(0, unhex(CAPTURED_113[name]))
    conv += raw(0, req(L, "GET", s("/cnt")))
    write("server", "torch113_capture", conv)

    # Two 1.13 clients: one waits, the other writes the key ("late wait").
    late = config()
    late += raw(0, req(L, "ADD", s("init/"), i64(1))) + raw(1, req(L, "ADD", s("init/"), i64(1)))
    late += raw(1, unhex(CAPTURED_113["late_wait"]))
    late += raw(0, req(L, "SET", s("/late"), s("x")))
    late += raw(1, req(L, "GET", s("/late")))
    write("server", "torch113_late_wait", late)

    # 1.13 watch: notifications go to the watching connection.
    watch = config()
    watch += raw(1, unhex(CAPTURED_113["watch"]))
    watch += raw(0, req(L, "SET", s("/w"), s("new")))
    watch += raw(0, req(L, "ADD", s("/w"), i64(1)))  # not a number: closes conn 0
    watch += raw(2, req(L, "SET", s("/w"), s("7")) + req(L, "DELETE_KEY", s("/w")))
    write("server", "torch113_watch", watch)

    # GET of a missing key closes a 1.13 connection.
    write("server", "torch113_get_missing", config() + raw(0, req(L, "GET", s("/nokey"))))

    # 2.x: handshake, a WAIT that parks, then CANCEL_WAIT (the client's wait timeout).
    cancel = config()
    cancel += raw(0, handshake())
    cancel += raw(0, req(C, "WAIT", keys("/never")))
    cancel += raw(0, req(C, "CANCEL_WAIT"))
    cancel += raw(0, req(C, "SET", s("/k"), s("v")) + req(C, "WAIT", keys("/k")))
    write("server", "torch2_wait_cancel", cancel)

    # 2.x: woken and cancelled at once (the reply race: 00 then 01).
    race = config()
    race += raw(0, handshake(1)) + raw(1, handshake(2))
    race += raw(1, req(C, "WAIT", keys("/a", "/b")))
    race += raw(0, req(C, "MULTI_SET", struct.pack("<Q", 2), s("/a"), s("1"), s("/b"), s("2")))
    race += raw(1, req(C, "CANCEL_WAIT") + req(C, "MULTI_GET", keys("/a", "/b")))
    write("server", "torch2_wake_then_cancel", race)

    # 2.x queues: a blocking pop is WAIT then QUEUE_POP; a push wakes one waiter.
    q = config()
    q += raw(0, handshake(1)) + raw(1, handshake(2)) + raw(2, handshake(3))
    q += raw(1, req(C, "WAIT", keys("q"))) + raw(2, req(C, "WAIT", keys("q")))
    q += raw(0, req(C, "QUEUE_PUSH", s("q"), s("job1")))
    q += raw(1, req(C, "QUEUE_POP", s("q")))
    q += raw(0, req(C, "QUEUE_PUSH", s("q"), s("job2")) + req(C, "QUEUE_LEN", s("q")))
    q += raw(2, req(C, "QUEUE_POP", s("q")) + req(C, "QUEUE_POP", s("q")))
    write("server", "torch2_queue", q)

    # A rendezvous: four clients count themselves in and wait for the last one's key.
    storm = config()
    for slot in range(4):
        storm += raw(slot, handshake(100 + slot) + req(C, "ADD", s("init/"), i64(1)))
    for slot in range(3):
        storm += raw(slot, req(C, "WAIT", keys("/rdzv/last_member")))
    storm += raw(3, req(C, "SET", s("/rdzv/last_member"), s("3")))
    for slot in range(4):
        storm += raw(slot, req(C, "GET", s("/rdzv/last_member")))
    write("server", "torch2_rendezvous", storm)

    # Connections that go away: mid-request, while parked, right after the handshake.
    gone = config()
    gone += raw(0, handshake()) + raw(0, req(C, "SET", s("/k"), s("value"))[:7]) + close(0)
    gone += raw(1, req(L, "WAIT", keys("/k2"))) + close(1)
    gone += raw(2, handshake()[:3]) + close(2)
    gone += raw(3, req(L, "SET", s("/k2"), s("v")))
    gone += raw(1, req(L, "GET", s("/k2")))
    write("server", "close_mid_request", gone)

    # Limits: tight key/value/count limits and one parked waiter at most.
    lim = config(max_waiters_sel=1, tight=True, request_bytes_sel=1)
    lim += raw(0, req(L, "WAIT", keys("/a")))
    lim += raw(1, req(L, "WAIT", keys("/b")))  # second waiter: closed
    lim += raw(2, req(L, "SET", s("/a_key_of_17_bytes"), s("v")))  # key over 16 bytes
    lim += raw(3, req(L, "CHECK", keys("a", "b", "c", "d", "e")))  # 5 keys over 4
    lim += raw(2, req(L, "SET", s("/a"), s("x" * 33)))  # value over 32 bytes
    lim += raw(2, req(L, "SET", s("/a"), s("ok")))
    write("server", "limits", lim)

    # The 2.x handshake byte by byte, then synthesized requests on fresh connections.
    bw = config() + raw(0, handshake(), kind=BYTEWISE)
    bw += raw(0, req(C, "ADD", s("init/"), i64(1)), kind=BYTEWISE)
    sel = lambda slot: bytes([slot + 4 * REQUEST])
    bw += sel(1) + bytes([0x80 | 7, 0b00000101, 0x11, 0x01])   # current WAIT
    bw += sel(2) + bytes([0x80 | 2, 0b00000100, 0x02, 0x00])   # current SET
    bw += sel(1) + bytes([0x80 | 14, 0, 0, 0])                 # CANCEL_WAIT
    bw += sel(3) + bytes([0x07, 0b00000000, 0x00, 0x00])        # legacy WAIT
    bw += sel(0) + bytes([0x80 | 9, 0b00001000, 0x00, 0x00])   # WATCH_KEY (becomes WAIT)
    write("server", "bytewise_and_synthesized", bw)

    # Many waiters on one key (a WAIT listing it 100 times), some pipelined work queued behind a
    # parked WAIT, and a large request read in several pieces.
    big = config()
    big += raw(0, handshake(1)) + raw(1, handshake(2))
    big += raw(0, req(C, "WAIT", keys(*(["/k"] * 100))))
    big += raw(1, req(C, "WAIT", keys("/other")))
    big += bytes([1 + 4 * REPEATED, 20]) + s_len_prefixed(req(C, "GET", s("/k")))  # 321 GETs, held
    big += raw(1, req(C, "CANCEL_WAIT"))
    big += raw(0, req(C, "CANCEL_WAIT"))
    big += raw(2, req(L, "SET", s("/big"), s("v" * 19984))[:1 + 8 + 4 + 8])
    big += bytes([2 + 4 * REPEATED, 78]) + s_len_prefixed(b"v" * 16)  # 1249 x 16 bytes of value
    write("server", "many_waiters_and_big_requests", big)

    # cohortd's tagged writes: an ADD retried after a lost reply runs once; a new request id runs
    # again; a tagged read closes the connection.
    tw = config()
    tw += raw(0, tagged(7, 1, req(C, "ADD", s("/rdzv/count"), i64(1))))
    tw += raw(0, tagged(7, 1, req(C, "ADD", s("/rdzv/count"), i64(1))))  # the retry
    tw += close(0)
    tw += raw(1, handshake() + tagged(7, 1, req(C, "ADD", s("/rdzv/count"), i64(1))))
    tw += raw(1, tagged(7, 2, req(C, "COMPARE_SET", s("/rdzv/owner"), s(""), s("node0"))))
    tw += raw(1, tagged(8, 1, req(C, "MULTI_SET", struct.pack("<Q", 1), s("/a"), s("1"))))
    tw += raw(1, req(C, "GET", s("/rdzv/count")))
    tw += raw(2, req(L, "SET", s("/x"), s("1")) + tagged(9, 1, req(L, "DELETE_KEY", s("/x"))))
    tw += raw(3, tagged(9, 2, req(C, "GET", s("/x"))))  # not a write: closed
    tw += bytes([2 + 4 * TAGGED, 0x80 | 5, 0x04, 0x00, 0x01, 0x31])  # synthesized tagged ADD
    tw += bytes([2 + 4 * TAGGED, 0x80 | 5, 0x04, 0x00, 0x01, 0x31])  # and its retry
    write("server", "tagged_writes", tw)

    # The token handshake: required, with a token; a right proof, a wrong one, none at all.
    au = config(must_auth=True, token=True)
    au += bytes([0 + 4 * AUTH]) + raw(0, handshake() + req(C, "SET", s("/k"), s("v")))
    au += raw(1, b"\x41") + raw(1, b"\x42" + b"\0" * 32)  # wrong proof: closed
    au += raw(2, handshake())  # no handshake: closed
    au += bytes([3 + 4 * AUTH]) + raw(3, req(L, "GET", s("/k")))  # legacy after the handshake
    write("server", "authenticated", au)
    # Not required, no token: a HELLO still gets a challenge, and any proof passes.
    au2 = config() + raw(0, b"\x41") + raw(0, b"\x42" + b"\x01" * 32 + handshake())
    au2 += raw(1, handshake())
    write("server", "optional_handshake", au2)


# ---- fuzz_hostlist ------------------------------------------------------------------------------
HOSTLISTS = {
    "ranges_and_singles": "tux[0-5,12,20-25]",
    "zero_padding": "linux[0000-1023]",
    "cartesian": "rack[0-63]_blade[0-41]",
    "two_groups_dash": "a[1-2]-b[3-4]",
    "bracket_after_dash": "host-[001-002]",
    "bracket_after_dash_2": "c457-[011-012]",
    "mixed": "gpu[01-04,07],cpu3",
    "megatron": "nodeA,nodeB[001,003],nodeC",
    "noncontiguous": "host[001,003-004,006]",
    "comma_in_brackets": "linux[1,2]",
    "whitespace": "n1 n2,n3",
    "single": "localhost",
    "too_large": "a[0-999999999].b[0-9]",
    "unbalanced": "n[1-",
    "backwards": "n[3-1]",
    "counts": "2(x3),1",
    "counts_cpus": "72(x2),36",
}


def hostlist_seeds():
    for name, text in HOSTLISTS.items():
        write("hostlist", name, text)


# ---- fuzz_error_file ------------------------------------------------------------------------------
ERROR_FILES = {
    # @record's format (ErrorHandler.record_exception)
    "record": '{"message": {"message": "ValueError: boom from rank 1 attempt 1", "extraInfo": '
              '{"py_callstack": "Traceback (most recent call last):\\n  File \\"fail.py\\", line 9, '
              'in <module>\\n    main()\\nValueError: boom from rank 1 attempt 1\\n", '
              '"timestamp": "1796008406"}}}',
    # ProcessFailure's other accepted format
    "plain": '{"message": "RuntimeError: CUDA error: out of memory", "timestamp": 1796008406}',
    # the launcher's own copy for its parent (message.errorCode set)
    "parent_copy": '{"message": {"message": "ValueError: boom", "extraInfo": {"py_callstack": '
                   '"Traceback ...", "timestamp": "1796008406"}, "errorCode": 1}}',
    "no_extra_info": '{"message": {"message": "KeyError: \'x\'"}}',
    "numeric_timestamp": '{"message": {"message": "E", "extraInfo": {"timestamp": 1796008406.5}}}',
    "bad_timestamp": '{"message": {"message": "E", "extraInfo": {"timestamp": "soon"}}}',
    "message_not_string": '{"message": 42}',
    "not_json": "Traceback (most recent call last):\n  ValueError: boom\n",
    "empty": "",
    "truncated": '{"message": {"message": "ValueError: bo',
}


def error_file_seeds():
    for name, text in ERROR_FILES.items():
        write("error_file", name, text)


# ---- fuzz_etcd_response -------------------------------------------------------------------------
HEADER = '{"cluster_id":"14841639068965178418","member_id":"10276657743932975437","revision":"%s","raft_term":"2"}'
ETCD = {
    "range": '{"header":%s,"kvs":[{"key":"L3JkenYvcm91bmQ=","create_revision":"2","mod_revision":"2",'
             '"version":"1","value":"MQ=="}],"count":"1"}' % (HEADER % "2"),
    "range_missing": '{"header":%s}' % (HEADER % "2"),
    "range_lease": '{"header":%s,"kvs":[{"key":"L2EvYg==","create_revision":"5","mod_revision":"7",'
                   '"version":"3","value":"","lease":"478685763571075088"}],"count":"1"}' % (HEADER % "7"),
    "txn_succeeded": '{"header":%s,"succeeded":true,"responses":[{"response_put":{"header":'
                     '{"revision":"9"}}}]}' % (HEADER % "9"),
    "txn_failed": '{"header":%s,"responses":[{"response_range":{"header":{"revision":"9"},"kvs":'
                  '[{"key":"L2xvY2s=","create_revision":"8","mod_revision":"8","version":"1",'
                  '"value":"bm9kZS0x"}],"count":"1"}}]}' % (HEADER % "9"),
    "txn_delete": '{"header":%s,"succeeded":true,"responses":[{"response_delete_range":'
                  '{"header":{"revision":"10"},"deleted":"1"}}]}' % (HEADER % "10"),
    "watch_created": '{"result":{"header":%s,"created":true}}' % (HEADER % "11"),
    "watch_put": '{"result":{"header":%s,"events":[{"kv":{"key":"L3cvYQ==","create_revision":"12",'
                 '"mod_revision":"12","version":"1","value":"MQ=="}}]}}' % (HEADER % "12"),
    "watch_update": '{"result":{"header":%s,"events":[{"kv":{"key":"L3cvYQ==","create_revision":"12",'
                    '"mod_revision":"13","version":"2","value":"Mg=="},"prev_kv":{"key":"L3cvYQ==",'
                    '"create_revision":"12","mod_revision":"12","version":"1","value":"MQ=="}}]}}' % (HEADER % "13"),
    "watch_delete": '{"result":{"header":%s,"events":[{"type":"DELETE","kv":{"key":"L3cvYQ==",'
                    '"mod_revision":"14"},"prev_kv":{"key":"L3cvYQ==","create_revision":"12",'
                    '"mod_revision":"13","version":"2","value":"Mg=="}}]}}' % (HEADER % "14"),
    "watch_compacted": '{"result":{"header":%s,"canceled":true,"compact_revision":"5"}}' % (HEADER % "14"),
    "lease_grant": '{"header":%s,"ID":"478685763571075088","TTL":"3"}' % (HEADER % "14"),
    "keepalive": '{"result":{"header":%s,"ID":"478685763571075088","TTL":"3"}}' % (HEADER % "14"),
    "keepalive_expired": '{"result":{"header":%s,"ID":"478685763571075088"}}' % (HEADER % "14"),
    "deleterange": '{"header":%s,"deleted":"1"}' % (HEADER % "15"),
    "error_lease": '{"error":"etcdserver: requested lease not found","message":"etcdserver: '
                   'requested lease not found","code":5}',
    "error_base64": '{"error":"illegal base64 data at input byte 3","message":"illegal base64 data '
                    'at input byte 3","code":3}',
    "base64": "L3JkenYvcm91bmQ=",
}


def etcd_seeds():
    for name, text in ETCD.items():
        write("etcd_response", name, text)


# ---- heartbeat pipe (base/include/cohort/base/heartbeat_line.h) ---------------------------------
HEARTBEAT = {
    # first byte: how the pipe cuts the rest (0: not at all)
    "module": b"\x00H 1 4242 probe\naA 2 0.020773 0 0.000197722\nA 15 0.0204204 0 0.000107248\n",
    "by_hand": b"\x03H 1 4242 -\nbbS 7 0.25 128 0.05\nb",
    "libcohort": b"\x05bbbS 123456789 0.0123456 98765.4 0.000321\nbb",
    "cut_short": b"\x01S 42 0.25 12",
    "too_long": b"\x07S " + b"7" * 200 + b"\nb",
    "malformed": b"\x02S nonsense\nS 2 -0.1 10 0.01\nH 1 0 -\nH 1 5 a,,b\nA 3 0.1 1 0.01 x\n",
}


def heartbeat_seeds():
    for name, data in HEARTBEAT.items():
        write("heartbeat", name, data)


# ---- hang probe answers (base/include/cohort/base/hang_probe.h) ----------------------------------
def answer(pid, frames, groups, collectives, fr=True, torch="2.15.0", time=1764790000.25):
    threads = [{"name": "MainThread", "main": True, "frames": frames},
               {"name": "pin_memory", "main": False, "frames": [["queue.py", 180, "get", ""]]}]
    a = {"v": 1, "id": 7, "pid": pid, "time": time, "threads": threads, "groups": groups,
         "fr": fr, "collectives": collectives}
    if torch:
        a["torch"] = torch
    return json.dumps(a, separators=(",", ":"))


def entry(seq, op="gloo:all_reduce", done=False, since=1764789988.0, pg="0"):
    return {"pg": pg, "seq": seq, "p2p_seq": 0, "op": op, "in": [[520]], "out": [[520]],
            "dtypes": ["Float"], "state": "scheduled", "done": done, "since": since,
            "timeout_s": 1800.0, "p2p": False}


C10D = "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py"
WAITING = [["train.py", 40, "<module>", "train()"],
           ["/torch/autograd/graph.py", 1113, "_engine_run_backward", "return Variable._exec"]]
STALLED = [["train.py", 40, "<module>", "train()"], ["train.py", 9, "stuck_in_data_loading",
                                                     "batch = next(loader)"]]
GROUP = [{"name": "0", "backend": "gloo", "ranks": [0, 1], "seq": 26}]
BEHIND = [{"name": "0", "backend": "gloo", "ranks": [0, 1], "seq": 25}]
# first byte: the hang timeout; each line: the rank's beat state (bit 0 beat, bit 1 by hand,
# bit 2 no answer, bits 3-7 silence in half seconds), then its answer.
HANG_ANSWERS = {
    "stall_fr": [5, (0x51, answer(100, WAITING, GROUP, [entry(25, done=True), entry(26)])),
                 (0x51, answer(101, STALLED, BEHIND, [entry(25, done=True)]))],
    "desync_fr": [5, (0x51, answer(100, WAITING, GROUP, [entry(26)])),
                  (0x51, answer(101, WAITING, GROUP, [entry(26, op="gloo:all_gather")]))],
    "torch113": [3, (0x31, answer(100, [["train.py", 40, "<module>", ""],
                                        [C10D, 1536, "all_reduce", "work.wait()"]],
                                  [{"name": "0", "backend": "gloo", "ranks": [0, 1],
                                    "seq": 1234567}], [], fr=False, torch="1.13.1")),
                 (0x31, answer(101, STALLED, [{"name": "0", "backend": "gloo", "ranks": [0, 1],
                                               "seq": 1234566}], [], fr=False, torch="1.13.1"))],
    "libcohort": [4, (0x29, answer(100, [], [{"name": "cohort/world", "backend": "cohort-cpu",
                                              "ranks": [0, 1], "seq": 9}],
                                   [entry(9, op="allreduce", pg="cohort/world")], fr=False,
                                   torch=None)),
                  (0x2D, "")],
    "quiet_one_gpu": [3, (0x43, answer(100, STALLED, [], []))],
    "no_answer_by_hand": [3, (0x47, "")],
    "bad_clock": [2, (0x51, answer(100, WAITING, GROUP, [entry(26, since=1.0)], time=1e300)),
                  (0x51, answer(101, STALLED, BEHIND, [], time=-5))],
}


def hang_answer_seeds():
    for name, (timeout, *lines) in HANG_ANSWERS.items():
        body = b"\n".join(bytes([state]) + text.encode() for state, text in lines)
        write("hang_answer", name, bytes([timeout - 1]) + body)


if __name__ == "__main__":
    codec_seeds()
    server_seeds()
    hostlist_seeds()
    error_file_seeds()
    etcd_seeds()
    heartbeat_seeds()
    hang_answer_seeds()
