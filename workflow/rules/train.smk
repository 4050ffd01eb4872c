# Training and evaluation: every configured model x dataset x seed, trained by `inn train`
# (resumable: a restarted job continues from the last.pt beside its outputs) and scored on the
# test split by `inn evaluate`; NLTK's averaged perceptron is trained as the POS peer. Every POS
# model is exported as a self-contained tagger file with its test score (`inn tag` reads it).


rule train_model:
    input:
        data_files(["train", "dev"]),
    output:
        checkpoint=f"results/train/{RUN}/checkpoint.pt",
        history=f"results/train/{RUN}/history.tsv",
    log:
        f"logs/train_model/{RUN}.log",
    benchmark:
        f"benchmarks/train_model/{RUN}.tsv"
    wildcard_constraints:
        model=NEURAL_MODEL,
    params:
        data=data_dir,
        out=lambda wildcards, output: Path(output.checkpoint).parent,
        settings=model_settings,
        device=config["device"],
    threads: config["resources"]["threads"]
    resources:
        gpu=gpus,
        mem_mb=config["resources"]["mem_mb"],
        runtime=config["resources"]["runtime"],
    conda:
        ENV
    shell:
        "python -m inn train --task {wildcards.task} --data {params.data} --model {wildcards.model}"
        " --seed {wildcards.seed} --out-dir {params.out} --device {params.device} --threads {threads}"
        " --settings {params.settings:q} --retrain 2> {log}"


rule train_perceptron:
    input:
        data_files(["train", "dev"]),
    output:
        checkpoint="results/train/{task}/{dataset}/perceptron/seed{seed}/checkpoint.pt",
        history="results/train/{task}/{dataset}/perceptron/seed{seed}/history.tsv",
    log:
        "logs/train_perceptron/{task}/{dataset}/seed{seed}.log",
    benchmark:
        "benchmarks/train_perceptron/{task}/{dataset}/seed{seed}.tsv"
    wildcard_constraints:
        task="pos",
    params:
        data=data_dir,
        out=lambda wildcards, output: Path(output.checkpoint).parent,
        iterations=config["models"]["pos"]["perceptron_iterations"],
        max_train=lambda wildcards: (
            f"--max-train {config['training']['pos']['max_train']}" if config["training"]["pos"]["max_train"] else ""
        ),
        scale=config["scale"],
    resources:
        mem_mb=4000,
        runtime=120,
    conda:
        ENV
    shell:
        "python -m inn train-perceptron --data {params.data} --out-dir {params.out} --seed {wildcards.seed}"
        " --iterations {params.iterations} {params.max_train} --scale {params.scale} 2> {log}"


rule evaluate_model:
    input:
        checkpoint=f"results/train/{RUN}/checkpoint.pt",
        history=f"results/train/{RUN}/history.tsv",
        data=data_files(["test"]),
    output:
        metrics=f"results/eval/{RUN}/metrics.json",
        predictions=f"results/eval/{RUN}/predictions.tsv",
    log:
        f"logs/evaluate_model/{RUN}.log",
    benchmark:
        f"benchmarks/evaluate_model/{RUN}.tsv"
    params:
        data=data_dir,
        out=lambda wildcards, output: Path(output.metrics).parent,
        device=config["device"],
    threads: config["resources"]["threads"]
    resources:
        mem_mb=config["resources"]["mem_mb"],
        runtime=120,
    conda:
        ENV
    shell:
        "python -m inn evaluate --checkpoint {input.checkpoint} --history {input.history}"
        " --data {params.data} --split test --out-dir {params.out} --device {params.device}"
        " --threads {threads} 2> {log}"


rule export_tagger:
    input:
        checkpoint="results/train/{task}/{dataset}/{model}/seed{seed}/checkpoint.pt",
        metrics="results/eval/{task}/{dataset}/{model}/seed{seed}/metrics.json",
        data=data_files(["train", "dev"]),
        segmenter=segmenter_input,
    output:
        "results/taggers/{task}/{dataset}/{model}/seed{seed}/tagger.pt",
    log:
        "logs/export_tagger/{task}/{dataset}/{model}/seed{seed}.log",
    benchmark:
        "benchmarks/export_tagger/{task}/{dataset}/{model}/seed{seed}.tsv"
    wildcard_constraints:
        task="pos",
    params:
        data=data_dir,
        segmenter=lambda wildcards, input: (f" --segmenter {input.segmenter}" if input.segmenter else ""),
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        ENV
    shell:
        "python -m inn export-tagger --checkpoint {input.checkpoint} --metrics {input.metrics}"
        " --data {params.data}{params.segmenter} --out {output} 2> {log}"


rule train_segmenter:
    input:
        train=lambda wildcards: config["corpora"][wildcards.dataset]["train"],
        dev=lambda wildcards: config["corpora"][wildcards.dataset]["dev"],
    output:
        "results/segmenters/{dataset}/segmenter.pt",
    log:
        "logs/train_segmenter/{dataset}.log",
    benchmark:
        "benchmarks/train_segmenter/{dataset}.tsv"
    params:
        epochs=config["segmenter"]["epochs"],
    threads: 1
    resources:
        mem_mb=2000,
        runtime=120,
    conda:
        ENV
    shell:
        "python -m inn train-segmenter {input.train} --dev {input.dev} --epochs {params.epochs}"
        " --threads {threads} --out {output} 2> {log}"
