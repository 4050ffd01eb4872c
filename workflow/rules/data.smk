# Data stage: POS corpora in one normalised form with their feature vocabularies, and the
# biased random walks, each with a summary table for the report.

from inn.data.download import EWT_RELEASE as UD_RELEASE  # the pinned release, its checksums beside it


# Downloads run where Snakemake runs, also with --profile profiles/slurm: compute nodes often
# have no internet access. They never prompt; offline they fail with one line (shown here and
# kept in the log) that names the config key pointing at a local copy instead.
localrules:
    download_ewt,
    download_treebank,


rule download_ewt:
    output:
        expand(f"{EWT_DEFAULT}/en_ewt-ud-{{split}}.conllu", split=SPLITS),
    log:
        "logs/download_ewt.log",
    params:
        release=UD_RELEASE,
        out=lambda wildcards, output: Path(output[0]).parent,
    conda:
        ENV
    shell:
        "python -m inn download-ewt --release {params.release} --out-dir {params.out} 2> {log}"
        " || (tail -n 1 {log} >&2; exit 1)"


rule download_treebank:
    output:
        f"{NLTK_DEFAULT}/corpora/treebank.zip",
    log:
        "logs/download_treebank.log",
    params:
        out=lambda wildcards, output: Path(output[0]).parents[1],
    conda:
        ENV
    shell:
        "python -m inn download-treebank --out-dir {params.out} 2> {log} || (tail -n 1 {log} >&2; exit 1)"


rule prepare_corpus:
    input:
        corpus_source,
    output:
        splits=expand("results/data/pos/{{corpus}}/{split}.tsv", split=SPLITS),
        features="results/data/pos/{corpus}/features.json",
        summary="results/data/pos/{corpus}/summary.tsv",
    log:
        "logs/prepare_corpus/{corpus}.log",
    benchmark:
        "benchmarks/prepare_corpus/{corpus}.tsv"
    wildcard_constraints:
        corpus="|".join(map(re.escape, pos_corpora())) or "(?!)",
    params:
        source=corpus_args,
        features=config["features"],
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        ENV
    shell:
        "python -m inn prepare-pos --corpus {wildcards.corpus} {params.source}"
        " --max-words {params.features[max_words]} --max-affixes {params.features[max_affixes]}"
        " --word-dim {params.features[word_dim]} --affix-dim {params.features[affix_dim]}"
        " --out-dir results/data/pos/{wildcards.corpus} 2> {log}"


rule generate_walks:
    output:
        walks=expand("results/data/walks/b{{b}}/{split}.pt", split=SPLITS),
        summary="results/data/walks/b{b}/summary.tsv",
        lengths="results/data/walks/b{b}/lengths.tsv",
    log:
        "logs/generate_walks/b{b}.log",
    benchmark:
        "benchmarks/generate_walks/b{b}.tsv"
    params:
        walks=config["walks"],
        seed=config["seed"],
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        ENV
    shell:
        "python -m inn generate-walks --b {wildcards.b} --dim {params.walks[dim]}"
        " --direction {params.walks[direction]} --max-len {params.walks[max_len]} --seed {params.seed}"
        " --train {params.walks[sizes][train]} --dev {params.walks[sizes][dev]}"
        " --test {params.walks[sizes][test]} --out-dir results/data/walks/b{wildcards.b} 2> {log}"


rule walk_floor:
    input:
        "results/data/walks/b{b}/test.pt",
    output:
        floor="results/data/walks/b{b}/floor.tsv",
        predictions="results/data/walks/b{b}/floor_predictions.tsv",
    log:
        "logs/walk_floor/b{b}.log",
    benchmark:
        "benchmarks/walk_floor/b{b}.tsv"
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        ENV
    shell:
        "python -m inn walk-floor {input} --out {output.floor} --predictions {output.predictions} 2> {log}"


rule summarize_data:
    input:
        # the corpora and walks that models learn: none prepared for a walks-only run, no walks
        # generated for a POS-only one (models.pos.run; models.walks: run, b)
        pos=expand("results/data/pos/{corpus}/summary.tsv", corpus=pos_datasets()),
        walks=expand("results/data/walks/{dataset}/summary.tsv", dataset=walk_datasets()),
        lengths=expand("results/data/walks/{dataset}/lengths.tsv", dataset=walk_datasets()),
    output:
        pos=report("results/tables/data_pos.tsv", category="Data", caption="../report/data_pos.rst"),
        walks=report("results/tables/data_walks.tsv", category="Data", caption="../report/data_walks.rst"),
        lengths="results/tables/data_walk_lengths.tsv",
    log:
        "logs/summarize_data.log",
    conda:
        ENV
    shell:
        "(python -m inn concat-tables --out {output.pos} {input.pos}"
        " && python -m inn concat-tables --out {output.walks} {input.walks}"
        " && python -m inn concat-tables --out {output.lengths} {input.lengths}) 2> {log}"
