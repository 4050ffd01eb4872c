"""The data stage (``workflow/rules/data.smk``): a POS corpus read, split and its feature
vocabularies fitted, the biased random walks generated (:mod:`~inn.experiment.data.prepare`),
and the walks' Bayes-optimal error, Table 1's floor (:mod:`~inn.experiment.data.walk_floor`).
The corpora's downloads are the library's (:mod:`inn.data.download`)."""
