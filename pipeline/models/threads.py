"""How many threads one fit may use (`pipeline.models.estimators`, `pipeline.models.single_thread`).

One thread per fit: a valuation fits many coalitions on its own worker threads, and a
multi-threaded LightGBM histogram is not bit-for-bit reproducible across thread counts
(HistGradientBoosting: `pipeline.models.single_thread`).
"""

THREADS = 1
