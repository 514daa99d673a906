"""A tiny paddle.Model.fit run (verbose=2, log_freq=2): its progress lines are what
paddle_ext.metrics reads; tests/unit/data/*.log were captured from this script."""
import numpy as np
import paddle
from paddle.io import Dataset
from paddle.static import InputSpec

class DS(Dataset):
    def __init__(self, n=256):
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((n, 4)).astype("float32")
        self.y = (self.x.sum(axis=1, keepdims=True) > 0).astype("int64")
    def __getitem__(self, i):
        return self.x[i], self.y[i]
    def __len__(self):
        return len(self.x)

net = paddle.nn.Sequential(paddle.nn.Linear(4, 8), paddle.nn.ReLU(), paddle.nn.Linear(8, 2))
model = paddle.Model(net, InputSpec([None, 4], "float32", "x"), InputSpec([None, 1], "int64", "y"))
model.prepare(paddle.optimizer.Adam(learning_rate=0.05, parameters=net.parameters()),
              paddle.nn.CrossEntropyLoss(), paddle.metric.Accuracy())
model.fit(DS(), DS(64), epochs=2, batch_size=32, log_freq=2, verbose=2)
print("user line: done")
