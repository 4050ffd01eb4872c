"""Data: POS corpora readers (:mod:`~inn.data.corpora`), the tagger's input features
(:mod:`~inn.data.features`), biased random walks (:mod:`~inn.data.walk`) and the downloads of
the free corpora (:mod:`~inn.data.download`)."""
