"""Calls a model through the sidecar and directly with NVIDIA's official `tritonclient`, which
sends tensors as raw_input_contents. Exits non-zero if the two responses differ, and prints (as
JSON on stdout) what it sent, so the Rust test can compare it with the logged record bit for bit.

With `stream`, the request goes over tritonclient's stream API (Triton's ModelStreamInfer)
instead of a unary call.

usage: triton_infer.py SIDECAR_ADDR MODEL_ADDR REQUEST_ID [stream]
"""

import json
import queue
import sys

import numpy as np
import tritonclient.grpc as grpcclient


def build_inputs(n):
    item_id = np.arange(7000, 7000 + n, dtype=np.int64)
    user_age = np.array([41], dtype=np.int32)
    user_locale = np.array([b"en-US"], dtype=np.object_)
    price = (np.arange(n, dtype=np.float32) * np.float32(0.1)).astype(np.float32)
    price[0] = np.float32(-0.0)
    emb = np.linspace(-1, 1, n * 8, dtype=np.float32).reshape(n, 8)
    category = np.array([f"cat-{i % 3}".encode() for i in range(n)], dtype=np.object_)
    arrays = {
        "item_id": (item_id, "INT64"),
        "user_age": (user_age, "INT32"),
        "user_locale": (user_locale, "BYTES"),
        "item_price": (price, "FP32"),
        "item_embedding": (emb, "FP32"),
        "item_category": (category, "BYTES"),
    }
    inputs = []
    for name, (array, datatype) in arrays.items():
        tensor = grpcclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return arrays, inputs


def infer(addr, inputs, request_id):
    client = grpcclient.InferenceServerClient(url=addr)
    result = client.infer(
        "ranker",
        inputs,
        request_id=request_id,
        outputs=[grpcclient.InferRequestedOutput("score")],
    )
    return result.as_numpy("score"), result.get_response().id


def stream_infer(addr, inputs, request_id):
    client = grpcclient.InferenceServerClient(url=addr)
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    client.async_stream_infer(
        "ranker",
        inputs,
        request_id=request_id,
        outputs=[grpcclient.InferRequestedOutput("score")],
    )
    result, error = answers.get(timeout=30)
    client.stop_stream()
    if error is not None:
        sys.exit(f"stream inference failed: {error}")
    return result.as_numpy("score"), result.get_response().id


def main():
    sidecar, model, request_id = sys.argv[1:4]
    call = stream_infer if sys.argv[4:5] == ["stream"] else infer
    arrays, inputs = build_inputs(6)
    via, via_id = call(sidecar, inputs, request_id)
    direct, _ = call(model, inputs, request_id)
    if via_id != request_id:
        sys.exit(f"the response id {via_id!r} is not the request's {request_id!r}")
    if via.tobytes() != direct.tobytes():
        sys.exit(f"scores differ through the sidecar: {via} vs {direct}")

    def bits(name):
        array, datatype = arrays[name]
        if datatype == "FP32":
            return [int(x) for x in array.reshape(-1).view(np.uint32)]
        if datatype == "BYTES":
            return [x.decode() for x in array.reshape(-1)]
        return [int(x) for x in array.reshape(-1)]

    json.dump(
        {
            "request_id": request_id,
            "candidate_ids": [int(x) for x in arrays["item_id"][0].reshape(-1)],
            "features": {name: bits(name) for name in arrays if name != "item_id"},
            "score_bits": [int(x) for x in via.reshape(-1).view(np.uint32)],
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
