"""Calls a model server's REST binding through the sidecar and directly, the ways apps do:
NVIDIA's `tritonclient.http` (binary tensor data, scores asked in binary and in JSON) and plain JSON over
HTTP (nested `data`, the request id in the body, in the header, or nowhere). Exits non-zero if a
response through the sidecar differs from the direct one (status and body), and prints (JSON on
stdout) what each logged call sent, so the Rust test can compare the records bit for bit.

usage: rest_infer.py SIDECAR_HTTP_ADDR MODEL_HTTP_ADDR
"""

import json
import sys

import httpx
import numpy as np
import tritonclient.http as httpclient


def arrays(n, seed):
    item_id = np.arange(7000 + seed * 100, 7000 + seed * 100 + n, dtype=np.int64)
    price = (np.arange(n, dtype=np.float32) * np.float32(0.1) + np.float32(seed)).astype(np.float32)
    price[0] = np.float32(-0.0)
    return {
        "item_id": (item_id, "INT64"),
        "user_age": (np.array([30 + seed], dtype=np.int32), "INT32"),
        "user_locale": (np.array([b"jp_JA"], dtype=np.object_), "BYTES"),
        "item_price": (price, "FP32"),
        "item_embedding": (np.linspace(-1, 1, n * 4, dtype=np.float32).reshape(n, 4), "FP32"),
        # Sent, never logged: not in the allow list.
        "secret": (np.full(n, 0.25, dtype=np.float32), "FP32"),
    }


def bits(array, datatype):
    flat = array.reshape(-1)
    if datatype == "FP32":
        return [int(x) for x in flat.view(np.uint32)]
    if datatype == "BYTES":
        return [x.decode() for x in flat]
    return [int(x) for x in flat]


def sent(request_id, tensors, score, model="ranker"):
    return {
        "model": model,
        "request_id": request_id,
        "candidate_ids": [int(x) for x in tensors["item_id"][0]],
        "features": {
            name: bits(a, d) for name, (a, d) in tensors.items() if name not in ("item_id", "secret")
        },
        "score_bits": [int(x) for x in np.asarray(score, dtype=np.float32).view(np.uint32)],
    }


def triton(addr, tensors, request_id, binary_scores):
    client = httpclient.InferenceServerClient(url=addr)
    inputs = []
    for name, (array, datatype) in tensors.items():
        tensor = httpclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array, binary_data=True)
        inputs.append(tensor)
    result = client.infer(
        "ranker",
        inputs,
        request_id=request_id,
        outputs=[httpclient.InferRequestedOutput("score", binary_data=binary_scores)],
    )
    return result.as_numpy("score"), result.get_response()["id"]


def as_json(tensors):
    def data(array, datatype):
        if datatype == "BYTES":
            return [x.decode() for x in array.reshape(-1)]
        # Nested as numpy writes it, floats as Python's shortest repr: the JSON apps send.
        return array.tolist()

    return [
        {"name": n, "shape": list(a.shape), "datatype": d, "data": data(a, d)}
        for n, (a, d) in tensors.items()
    ]


def same(what, via, direct):
    if via.status_code != direct.status_code or via.content != direct.content:
        sys.exit(
            f"{what}: through the sidecar {via.status_code} {via.content[:300]!r}, "
            f"directly {direct.status_code} {direct.content[:300]!r}"
        )


def main():
    sidecar, model = sys.argv[1:3]
    calls = []

    # tritonclient.http: binary inputs; scores asked in binary, then in JSON. (KServe's server
    # reads no compressed bodies, so the client's gzip option is left to the unit tests.)
    for request_id, seed, binary_scores in [("triton-http-1", 1, True), ("triton-http-2", 2, False)]:
        tensors = arrays(12, seed)
        via, via_id = triton(sidecar, tensors, request_id, binary_scores)
        direct, _ = triton(model, tensors, request_id, binary_scores)
        if via.tobytes() != direct.tobytes() or via_id != request_id:
            sys.exit(f"{request_id}: {via} ({via_id}) vs {direct}")
        calls.append(sent(request_id, tensors, via))

    # Plain JSON, as any HTTP client sends it.
    http = httpx.Client(timeout=30)
    headers = {"content-type": "application/json"}

    def post(addr, body, extra=None, model_name="ranker"):
        return http.post(
            f"http://{addr}/v2/models/{model_name}/infer",
            content=json.dumps(body),
            headers={**headers, **(extra or {})},
        )

    for request_id, seed, header in [("json-1", 3, None), ("from-header", 4, "from-header"), (None, 5, None)]:
        tensors = arrays(8, seed)
        body = {"inputs": as_json(tensors)}
        if request_id == "json-1":
            body["id"] = request_id
        extra = {"x-request-id": header} if header else None
        if request_id == "json-1":
            # Context an API gateway adds, which the allow list logs.
            extra = {"X-User-Country": "JP"}
        via = post(sidecar, body, extra)
        direct = post(model, body, extra)
        same(f"JSON call {request_id}", via, direct)
        if request_id is not None and "x-request-id" in via.headers:
            # The call named itself: the sidecar adds nothing to the response.
            sys.exit(f"{request_id}: the sidecar added x-request-id {via.headers['x-request-id']}")
        if request_id is None:
            # No id anywhere: the sidecar made one and returned it for the app's impressions.
            request_id = via.headers.get("x-request-id")
            if not request_id:
                sys.exit("no x-request-id returned for a call without an id")
        score = [x["data"] for x in via.json()["outputs"] if x["name"] == "score"][0]
        calls.append(sent(request_id, tensors, np.array(score, dtype=np.float32)))

    # A model whose rule logs no outputs (the sidecar's fast encoder then writes its record).
    tensors = arrays(5, 7)
    body = {"id": "other-1", "inputs": as_json(tensors)}
    via = post(sidecar, body, model_name="other")
    same("other model", via, post(model, body, model_name="other"))
    calls.append(sent("other-1", tensors, [], model="other"))

    # A model that is not allow-listed, metadata and health: forwarded, never logged.
    tensors = arrays(3, 6)
    same("unlisted model", post(sidecar, {"id": "unlisted-1", "inputs": as_json(tensors)}, model_name="unlisted"),
         post(model, {"id": "unlisted-1", "inputs": as_json(tensors)}, model_name="unlisted"))
    for path in ["/v2/health/ready", "/v2/models/ranker", "/v2/models/nope"]:
        same(path, http.get(f"http://{sidecar}{path}"), http.get(f"http://{model}{path}"))
    # A request the model server refuses: its error comes back as it was, nothing is logged.
    bad = {"id": "bad-1", "inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1]}]}
    same("refused call", post(sidecar, bad), post(model, bad))

    json.dump({"calls": calls}, sys.stdout)


if __name__ == "__main__":
    main()
