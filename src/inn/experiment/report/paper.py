"""The paper's own numbers (Kazi & Thompson, 2017), in one place, for the report to cite.

Everything here is labelled as the paper's (or as a reported reference) wherever it is shown;
none of it is ever mixed into our measurements.
"""

from __future__ import annotations

#: Table 1: biased random walks, per-step classification error by bias b.
TABLE1 = {
    2.0: {"inn": 0.0226, "bilstm": 0.0210},
    1.0: {"inn": 0.0518, "bilstm": 0.0589},
    0.75: {"inn": 0.0782, "bilstm": 0.0879},
    0.5: {"inn": 0.119, "bilstm": 0.132},
    0.25: {"inn": 0.189, "bilstm": 0.205},
}

#: Table 2: WSJ test token accuracy (%), by model. The Stanford tagger was reported, not run.
TABLE2_WSJ = {"gru": 96.43, "lstm": 96.47, "bigru": 97.28, "bilstm": 97.25, "inn": 97.37}
STANFORD_WSJ = 97.33

#: Reference figures for the free corpora, published by others and reported rather than run by us: per corpus,
#: the tag column a figure scores and the figures. A figure for XPOS says nothing of a UPOS run.
REFERENCES = {
    "ewt": ("xpos", {"UDPipe 2 (reported, XPOS, gold tokens)": 97.1}),
}

#: Section 4: time to compute the hidden states of a batch of 20, t = a * n^p (seconds on a
#: Tesla K40, Theano).
TIMING = {
    "walks": {"a": 0.17, "p": 1.8, "r2": 0.994},
    "pos": {"a": 0.29, "p": 1.3, "r2": 0.910},
}
PAPER_WALL_CLOCK = "implicit runs 3-5 days, explicit runs 1-3 hours on one Tesla K40"
