"""Calls a model through the sidecar and directly with KServe's official Python client
(`kserve.InferenceGRPCClient`), sending Python lists, which it encodes as typed `contents`
(tritonclient, in triton_infer.py, covers raw tensors). Exits non-zero if the two responses
differ, and prints (as JSON on stdout) what it sent, so the Rust test can compare it with the
logged record bit for bit.

usage: kserve_infer.py SIDECAR_ADDR MODEL_ADDR REQUEST_ID
"""

import asyncio
import json
import sys

import numpy as np
from kserve import InferenceGRPCClient, InferInput, InferRequest


def build_inputs(n):
    item_id = [9100 + i for i in range(n)]
    price = [float(np.float32(i) * np.float32(0.3)) for i in range(n)]
    price[1] = -0.0
    emb = [float(x) for x in np.linspace(-1, 1, n * 8, dtype=np.float32)]
    tensors = {
        "item_id": ([n], "INT64", item_id),
        "user_age": ([1], "INT32", [29]),
        "user_locale": ([1], "BYTES", ["jp-JA"]),
        "item_price": ([n], "FP32", price),
        "item_embedding": ([n, 8], "FP32", emb),
        "item_category": ([n], "BYTES", [f"shelf-{i % 2}" for i in range(n)]),
    }
    inputs = [InferInput(name, shape, dt, data=list(values)) for name, (shape, dt, values) in tensors.items()]
    return tensors, inputs


async def infer(addr, request_id):
    _, inputs = build_inputs(5)
    client = InferenceGRPCClient(url=addr, use_ssl=False)
    response = await client.infer(InferRequest("ranker", inputs, request_id=request_id))
    score = next(o for o in response.outputs if o.name == "score")
    return np.asarray(score.as_numpy(), dtype=np.float32), response.id


async def main():
    sidecar, model, request_id = sys.argv[1:4]
    tensors, _ = build_inputs(5)
    via, via_id = await infer(sidecar, request_id)
    direct, _ = await infer(model, request_id)
    if via_id != request_id:
        sys.exit(f"the response id {via_id!r} is not the request's {request_id!r}")
    if via.tobytes() != direct.tobytes():
        sys.exit(f"scores differ through the sidecar: {via} vs {direct}")

    def bits(name):
        _, datatype, values = tensors[name]
        if datatype == "FP32":
            return [int(x) for x in np.asarray(values, dtype=np.float32).view(np.uint32)]
        return [str(x) if datatype == "BYTES" else int(x) for x in values]

    json.dump(
        {
            "request_id": request_id,
            "candidate_ids": [int(x) for x in tensors["item_id"][2]],
            "features": {name: bits(name) for name in tensors if name != "item_id"},
            "score_bits": [int(x) for x in via.reshape(-1).view(np.uint32)],
        },
        sys.stdout,
    )


if __name__ == "__main__":
    asyncio.run(main())
