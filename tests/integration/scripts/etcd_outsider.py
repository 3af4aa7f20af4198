"""An outsider's tries at a job's etcd (https only, client certificates required, etcd's
authentication on), each reported as one JSON line:

    etcd_outsider.py HOST PORT CA CERT KEY PREFIX
    {"try": "http", "status": 400, "body": "...", "error": null, "seconds": 0.01}

Tries (every request goes to etcd's JSON gateway; `status` is null when no HTTP reply came,
`error` then says why):
    http        POST /v3/kv/put over plain http
    no-cert     POST /v3/kv/put over https (TLS 1.2), trusting etcd's CA (CA), with no client
                certificate: etcd refuses it in the handshake
    no-cert-tls13  the same over TLS 1.3, whose handshake is over for the client before etcd
                checks it: etcd's refusal (an alert, or the connection closed) races the request
    no-user     with the client certificate (CERT, KEY) and no user: POST /v3/kv/put of
                PREFIX + "coordinator", a forged value
    no-user-read  the same, POST /v3/kv/range of every key under PREFIX
"""
import base64
import http.client
import json
import ssl
import sys
import time


def b64(text):
    return base64.b64encode(text.encode()).decode()


def post(host, port, path, body, context=None):
    """(status, body) of the reply, or (None, the error)."""
    conn = (http.client.HTTPSConnection(host, port, timeout=5, context=context) if context
            else http.client.HTTPConnection(host, port, timeout=5))
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        return reply.status, reply.read().decode(errors="replace"), None
    except Exception as e:  # noqa: BLE001  (what failed is the result)
        return None, "", f"{type(e).__name__}: {e}"
    finally:
        conn.close()


def main():
    host, port, ca, cert, key, prefix = sys.argv[1], int(sys.argv[2]), *sys.argv[3:7]
    put = {"key": b64(prefix + "coordinator"), "value": b64("outsider pid 1 (forged by an outsider)")}
    read = {"key": b64(prefix), "range_end": b64(prefix[:-1] + chr(ord(prefix[-1]) + 1))}
    no_cert = ssl.create_default_context(cafile=ca)
    no_cert.maximum_version = ssl.TLSVersion.TLSv1_2
    no_cert_13 = ssl.create_default_context(cafile=ca)
    no_cert_13.minimum_version = ssl.TLSVersion.TLSv1_3
    with_cert = ssl.create_default_context(cafile=ca)
    with_cert.load_cert_chain(cert, key)
    tries = [("http", "/v3/kv/put", put, None), ("no-cert", "/v3/kv/put", put, no_cert),
             ("no-cert-tls13", "/v3/kv/put", put, no_cert_13),
             ("no-user", "/v3/kv/put", put, with_cert), ("no-user-read", "/v3/kv/range", read, with_cert)]
    for name, path, body, context in tries:
        t0 = time.monotonic()
        status, text, error = post(host, port, path, body, context)
        print(json.dumps({"try": name, "status": status, "body": text[:500], "error": error,
                          "seconds": round(time.monotonic() - t0, 3)}), flush=True)


if __name__ == "__main__":
    main()
