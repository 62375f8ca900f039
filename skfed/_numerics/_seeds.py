"""The range of the seeds a server draws for its clients' random streams."""

import numpy as np

#: Seeds are drawn in [0, SEED_MAX): what every NumPy and scikit-learn
#: generator accepts.
SEED_MAX = int(np.iinfo(np.int32).max)
