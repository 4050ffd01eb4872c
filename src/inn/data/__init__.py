"""Data: POS corpora readers (:mod:`~inn.data.corpora`), the tagger's input features
(:mod:`~inn.data.features`), biased random walks (:mod:`~inn.data.walk`), the downloads of
the free corpora (:mod:`~inn.data.download`), the fingerprints of prepared folders
(:mod:`~inn.data.fingerprint`) and text to tag, kept line for line (:mod:`~inn.tagging.documents`)."""
