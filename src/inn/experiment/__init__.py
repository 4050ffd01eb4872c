"""The experiment: the drivers that reproduce Kazi & Thompson (2017) with the library.

Data preparation (:mod:`~inn.experiment.data.prepare`), training (:mod:`~inn.experiment.train.loop`,
:mod:`~inn.experiment.train.perceptron`), evaluation, timing, the implicit-layer benchmark and
its peers, the tables, their statistics and the report, the workflow's config checks, and the
``inn`` command line (:mod:`~inn.experiment.cli`). The library (everything in :mod:`inn` outside
this subpackage) imports nothing from here.
"""
