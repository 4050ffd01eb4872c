# Two jobs for the SLURM profile: one asks for a GPU the way the training rules do, one does
# not. Each writes what it was given; tests/test_slurm.py checks where SLURM ran them.


rule all:
    input:
        "probe/gpu.txt",
        "probe/cpu.txt",
    default_target: True


rule probe_gpu:
    output:
        "probe/gpu.txt",
    resources:
        gpu=1,
    shell:
        'echo "CUDA_VISIBLE_DEVICES=${{CUDA_VISIBLE_DEVICES:-unset}}" > {output}'


rule probe_cpu:
    output:
        "probe/cpu.txt",
    shell:
        'echo "CUDA_VISIBLE_DEVICES=${{CUDA_VISIBLE_DEVICES:-unset}}" > {output}'
