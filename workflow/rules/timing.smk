# Runtime scaling (paper section 4): seconds to compute the hidden states of a batch against
# sequence length, for every trained neural model of the timed data sets, fitted as a n^p; and
# the implicit-layer benchmark (every solver against GRU/LSTM) on the trained INN, fed real dev
# tokens through its encoder (walks: fresh walks), and on fresh weights of the same size.


rule time_model:
    input:
        checkpoint=f"results/train/{RUN}/checkpoint.pt",
        data=data_files(["dev"]),
    output:
        "results/timing/{task}/{dataset}/{model}/seed{seed}.tsv",
    log:
        "logs/time_model/{task}/{dataset}/{model}/seed{seed}.log",
    benchmark:
        "benchmarks/time_model/{task}/{dataset}/{model}/seed{seed}.tsv"
    params:
        data=data_dir,
        timing=config["timing"],
        device=config["device"],
    threads: config["resources"]["threads"]
    resources:
        gpu=gpus,
        mem_mb=config["resources"]["mem_mb"],
        runtime=120,
    conda:
        ENV
    shell:
        "OMP_NUM_THREADS={threads} python -m inn time-model --checkpoint {input.checkpoint}"
        " --data {params.data} --lengths {params.timing[lengths]} --repeats {params.timing[repeats]}"
        " --batch-size {params.timing[batch_size]} --device {params.device} --out {output} 2> {log}"


rule fit_timing:
    input:
        run_files("results/timing/{task}/{dataset}/{model}/seed{seed}.tsv", timed_runs()),
    output:
        fits=report("results/tables/timing.tsv", category="Timing", caption="../report/timing.rst"),
        measurements="results/timing/measurements.tsv",
    log:
        "logs/fit_timing.log",
    conda:
        ENV
    shell:
        "python -m inn fit-timing --out {output.fits} --measurements {output.measurements} {input} 2> {log}"


rule benchmark_implicit:
    input:
        checkpoint=f"results/train/{RUN}/checkpoint.pt",
        data=data_files(["dev"]),
    output:
        measurements="results/timing/benchmark/{task}/{dataset}/{model}/seed{seed}.tsv",
        fits="results/timing/benchmark/{task}/{dataset}/{model}/seed{seed}_fits.tsv",
    log:
        "logs/benchmark_implicit/{task}/{dataset}/{model}/seed{seed}.log",
    benchmark:
        "benchmarks/benchmark_implicit/{task}/{dataset}/{model}/seed{seed}.tsv"
    wildcard_constraints:
        model=re.escape(BENCHMARKED),
    params:
        data=data_dir,
        timing=config["timing"],
        hidden=benchmarked_hidden_size,
        tol=config["solver"]["tol"],
        device=config["device"],
        # TorchDEQ's rows when installed (the benchmark's default), none when turned off
        peers="" if config["timing"]["benchmark"].get("peers", True) else " --peers",
    threads: config["resources"]["threads"]
    resources:
        gpu=gpus,
        mem_mb=config["resources"]["mem_mb"],
        runtime=240,
    conda:
        ENV
    shell:
        "python -m inn benchmark --model {wildcards.model} --checkpoint {input.checkpoint} --data {params.data}"
        " --hidden {params.hidden}"
        " --harder --lengths {params.timing[lengths]}"
        " --batch-size {params.timing[batch_size]} --methods {params.timing[benchmark][methods]}"
        " --repeats {params.timing[benchmark][repeats]} --tol {params.tol} --device {params.device}"
        " --threads {threads}{params.peers} --out {output.measurements} --fits-out {output.fits} 2> {log}"
