"""A deliberately small ranker: cheaper items score higher, a little more so for older users.
Enough to exercise a real Triton server end to end; not a model anyone should ship."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            price = pb_utils.get_input_tensor_by_name(request, "item_price").as_numpy()
            age = pb_utils.get_input_tensor_by_name(request, "user_age").as_numpy()
            boost = np.float32(0.01) * np.float32(age.reshape(-1)[0])
            score = (np.float32(1.0) / (np.float32(1.0) + np.abs(price)) + boost).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("score", score)]))
        return responses
