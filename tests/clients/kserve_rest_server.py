"""A model server that is not ours: KServe's Python ModelServer (FastAPI/uvicorn), serving the
Open Inference Protocol's REST binding (`/v2/...`, binary tensor data extension included) for
three models, `ranker`, `other` and `unlisted`. Each scores every candidate: the sum of its FP32 inputs' values
in its row, plus 0.5 per INT64 id (as FP32, shape [N]); answering in binary when the client asks.

usage: kserve_rest_server.py HTTP_PORT
"""

import sys

import kserve
import numpy as np
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer


class Ranker(Model):
    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload: InferRequest, headers=None, response_headers=None):
        n = None
        for tensor in payload.inputs:
            if tensor.datatype != "BYTES" and tensor.shape and tensor.shape[0] > 1:
                n = tensor.shape[0]
        n = n or 1
        score = np.zeros(n, dtype=np.float32)
        for tensor in payload.inputs:
            array = tensor.as_numpy()
            if tensor.datatype == "FP32":
                rows = array.reshape(array.shape[0], -1).sum(axis=1, dtype=np.float32)
                score += rows if rows.shape[0] == n else rows[0]
            elif tensor.datatype == "INT64":
                score += np.float32(0.5) * (array.reshape(-1)[:n] % 7).astype(np.float32)
        output = InferOutput(name="score", shape=[n], datatype="FP32")
        output.set_data_from_numpy(score, binary_data=payload.use_binary_outputs)
        return InferResponse(
            # No id in the request: none in the response (as Triton answers).
            response_id=payload.id or "",
            model_name=self.name,
            infer_outputs=[output],
            use_binary_outputs=payload.use_binary_outputs,
        )


if __name__ == "__main__":
    port = int(sys.argv[1])
    models = [Ranker("ranker"), Ranker("other"), Ranker("unlisted")]
    ModelServer(http_port=port, enable_grpc=False, workers=1).start(models)
