# Collect every run into the paper's tables, and render the one HTML report.


rule collect_tables:
    input:
        metrics=all_metrics(),
        histories=run_files(f"results/train/{RUN}/history.tsv", training_runs()),
        predictions=run_files(f"results/eval/{RUN}/predictions.tsv", training_runs()),
        floors=expand("results/data/walks/{dataset}/floor.tsv", dataset=walk_datasets()),
        floor_predictions=expand("results/data/walks/{dataset}/floor_predictions.tsv", dataset=walk_datasets()),
    output:
        table1=report("results/tables/table1.tsv", category="Tables", caption="../report/table1.rst"),
        table2=report("results/tables/table2.tsv", category="Tables", caption="../report/table2.rst"),
        comparisons=report("results/tables/comparisons.tsv", category="Tables", caption="../report/comparisons.rst"),
        verdict=report("results/tables/verdict.tsv", category="Tables", caption="../report/verdict.rst"),
        runs="results/tables/runs.tsv",
    log:
        "logs/collect_tables.log",
    params:
        corpora=pos_corpora(),
        paper_corpora=list(paper_corpora(config)),  # the paper's data and its stand-ins: the verdict's corpora
        out=lambda wildcards, output: Path(output.table1).parent,
    conda:
        ENV
    shell:
        "python -m inn collect --metrics {input.metrics} --histories {input.histories}"
        " --predictions {input.predictions} --floors {input.floors}"
        " --floor-predictions {input.floor_predictions}"
        " --corpora {params.corpora} --paper-corpora {params.paper_corpora} --out-dir {params.out} 2> {log}"


rule render_report:
    input:
        tables=rules.collect_tables.output,
        data=rules.summarize_data.output,
        histories=run_files(f"results/train/{RUN}/history.tsv", training_runs()),
        timing=rules.fit_timing.output if config["timing"]["enabled"] else [],
        benchmarks=run_files("results/timing/benchmark/{task}/{dataset}/{model}/seed{seed}.tsv", benchmarked_runs()),
    output:
        report("results/report/index.html", category="Report", caption="../report/report.rst"),
    log:
        "logs/render_report.log",
    params:
        config=lambda wildcards: json.dumps(config),
        schema=Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml",
        tables=lambda wildcards, input: Path(input.tables[0]).parent,
        timing=lambda wildcards, input: (
            f"--timing {input.timing[1]} --timing-fits {input.timing[0]}" if input.timing else ""
        ),
        repo=workflow.basedir,
    conda:
        ENV
    shell:
        "python -m inn report --config-json {params.config:q} --schema {params.schema:q}"
        " --tables {params.tables} --histories {input.histories} {params.timing}"
        " --benchmarks {input.benchmarks} --repo {params.repo:q} --out {output} 2> {log}"
