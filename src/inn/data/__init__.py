"""Data preparation: POS corpora (:mod:`~inn.data.corpora`), the tagger's input features
(:mod:`~inn.data.features`) and biased random walks (:mod:`~inn.data.walk`)."""
