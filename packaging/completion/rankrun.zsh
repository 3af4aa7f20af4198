#compdef rankrun
# zsh completion for rankrun(1): installed as share/zsh/vendor-completions/_rankrun (a directory
# in Debian's zsh $fpath; elsewhere copy it into one, e.g. site-functions), and printed by
# `rankrun --print-completion zsh` (after compinit,
# `source <(rankrun --print-completion zsh)` loads it).
# Completes rankrun's options (torchrun's in both the dashed and the underscored spelling), the
# values of those that take a fixed set, and files once SCRIPT is reached: everything after
# SCRIPT belongs to the script and is completed as file names.

_rankrun() {
  local -a specs
  specs=(
    '(- : *)'{-h,--help}'[print the options and exit]'
    '(- : *)--version[print the version and exit]'
    '(- : *)'{--print-completion=,--print_completion=}'[print the completion script for a shell and exit]:shell:(bash zsh tcsh)'

    # torchrun's options.
    '(--nproc-per-node --nproc_per_node)'{--nproc-per-node=,--nproc_per_node=}'[workers on this node (default 1)]:workers:(gpu cpu auto 1 2 4 8)'
    '--nnodes=[number of nodes (default 1), or a MIN\:MAX range for an elastic job]:nodes: '
    '(--node-rank --node_rank)'{--node-rank=,--node_rank=}'[rank of this node, 0 to nnodes-1]:node rank: '
    '(--master-addr --master_addr)'{--master-addr=,--master_addr=}'[address of node 0, which hosts the store]:address:_hosts'
    '(--master-port --master_port)'{--master-port=,--master_port=}'[port of the store]:port: '
    '--standalone[single-node job with its own store on a free port]'
    '(-m --module)'{-m,--module}'[run SCRIPT as a Python module (python -m)]'
    '(--no-python --no_python)'{--no-python,--no_python}'[run SCRIPT as a program, without the Python interpreter]'
    '(--run-path --run_path)'{--run-path,--run_path}'[run SCRIPT with runpy.run_path]'
    '--role=[role name of the workers (default "default")]:role: '
    '(--max-restarts --max_restarts)'{--max-restarts=,--max_restarts=}'[restart the worker group up to N times on failure]:restarts: '
    '(--monitor-interval --monitor_interval)'{--monitor-interval=,--monitor_interval=}'[accepted for compatibility]:seconds: '
    '(--start-method --start_method)'{--start-method=,--start_method=}'[accepted for compatibility]:start method:(spawn fork forkserver)'
    '(--log-dir --log_dir)'{--log-dir=,--log_dir=}'[directory for per-rank logs and error files]:log directory:_directories'
    '(-r --redirects)'{-r+,--redirects=}'[send stdout/stderr to files in --log-dir]:streams (0 none, 1 out, 2 err, 3 both):(0 1 2 3)'
    '(-t --tee)'{-t+,--tee=}'[like --redirects, and also to the console]:streams (0 none, 1 out, 2 err, 3 both):(0 1 2 3)'
    '(--local-ranks-filter --local_ranks_filter)'{--local-ranks-filter=,--local_ranks_filter=}'[only these local ranks reach the console]:local ranks: '
    '(--rdzv-backend --rdzv_backend)'{--rdzv-backend=,--rdzv_backend=}'[rendezvous backend]:backend:(static c10d etcd)'
    '(--rdzv-endpoint --rdzv_endpoint)'{--rdzv-endpoint=,--rdzv_endpoint=}'[rendezvous host\[\:port\]]:host:_hosts'
    '(--rdzv-id --rdzv_id)'{--rdzv-id=,--rdzv_id=}'[job id (TORCHELASTIC_RUN_ID)]:job id: '
    '(--rdzv-conf --rdzv_conf)'{--rdzv-conf=,--rdzv_conf=}'[rendezvous settings, key=value,...]:settings: '
    '(--local-addr --local_addr)'{--local-addr=,--local_addr=}'[address this node advertises]:address:_hosts'
    '(--virtual-local-rank --virtual_local_rank)'{--virtual-local-rank,--virtual_local_rank}'[set LOCAL_RANK=0 in every worker]'
    '(--shutdown-timeout --shutdown_timeout)'{--shutdown-timeout=,--shutdown_timeout=}'[seconds the workers get to stop on shutdown]:seconds: '
    '(--signals-to-handle --signals_to_handle)'{--signals-to-handle=,--signals_to_handle=}'[signals passed on to the workers, comma-separated]:signals: '
    '(--duplicate-stdout-filters --duplicate_stdout_filters)'{--duplicate-stdout-filters=,--duplicate_stdout_filters=}'[copy stdout lines containing any of these strings to one file]:filters: '
    '(--duplicate-stderr-filters --duplicate_stderr_filters)'{--duplicate-stderr-filters=,--duplicate_stderr_filters=}'[copy stderr lines containing any of these strings to one file]:filters: '
    '(--log-line-prefix-template --log_line_prefix_template)'{--log-line-prefix-template=,--log_line_prefix_template=}'[template for the prefix of the workers'\'' console lines]:template: '
    '(--event-log-handler --event_log_handler)'{--event-log-handler=,--event_log_handler=}'[where torchelastic events go]:handler:(null console)'
    '(--logs-specs --logs_specs)'{--logs-specs=,--logs_specs=}'[the LogsSpecs implementation, by entry point name]:logs specs: '
    '(--numa-binding --numa_binding)'{--numa-binding=,--numa_binding=}'[run each worker on the CPUs of its own GPU NUMA node]:binding:(node socket exclusive core-complex)'
    '(--numa-memory --numa_memory)'{--numa-memory=,--numa_memory=}'[with --numa-binding: memory from the GPU node first]:policy:(none preferred)'

    # rankrun's own options.
    '--gpus=[GPUs to use, e.g. 0,1,2,3 or 0-3]:GPUs: '
    '(--no-pin --no_pin)'{--no-pin,--no_pin}'[do not pin one GPU per worker]'
    '(--term-timeout --term_timeout)'{--term-timeout=,--term_timeout=}'[seconds between SIGTERM and SIGKILL when stopping workers]:seconds: '
    '(--node-timeout --node_timeout)'{--node-timeout=,--node_timeout=}'[seconds of silence after which a node is lost]:seconds: '
    '(--store-protocol --store_protocol)'{--store-protocol=,--store_protocol=}'[TCPStore protocol of the workers'\'' PyTorch]:protocol:(auto 1.13 2.1 2.2)'
    '(--exit-timeout --exit_timeout)'{--exit-timeout=,--exit_timeout=}'[after a rank exits 0, the time the others have to finish]:seconds: '
    '(--heartbeat-timeout --heartbeat_timeout)'{--heartbeat-timeout=,--heartbeat_timeout=}'[silence allowed to a rank that heartbeats]:seconds: '
    '(--progress-timeout --progress_timeout)'{--progress-timeout=,--progress_timeout=}'[every rank blocked in collectives this long is a hang]:seconds: '
    '(--straggler-timeout --straggler_timeout)'{--straggler-timeout=,--straggler_timeout=}'[ranks waiting this long for a straggler is a hang]:seconds: '
    '(--store-memory --store_memory)'{--store-memory=,--store_memory=}'[bytes the store may hold for the workers, e.g. 512M or 4G]:size: '
    '(--store-connections-per-address --store_connections_per_address)'{--store-connections-per-address=,--store_connections_per_address=}'[connections the store takes from one address]:connections: '
    '(--init-timeout --init_timeout)'{--init-timeout=,--init_timeout=}'[time for every rank to reach the store rendezvous]:seconds: '
    '(--preempt-signal --preempt_signal)'{--preempt-signal=,--preempt_signal=}'[Slurm: the signal announcing preemption]:signal:(SIGUSR1 SIGUSR2)'
    '(--gpu-check --gpu_check)'{--gpu-check=,--gpu_check=}'[what to do about GPUs held by others or failing]:action:(warn refuse off)'
    '(--gpu-release-timeout --gpu_release_timeout)'{--gpu-release-timeout=,--gpu_release_timeout=}'[before a restart, the wait for GPU memory to be released]:seconds: '
    '--events=[append one JSON object per line to PATH for every event]:events file:_files'
    '(--metrics-port --metrics_port)'{--metrics-port=,--metrics_port=}'[serve Prometheus metrics on \[ADDRESS\:\]PORT]:port: '
    '(--metrics-textfile --metrics_textfile)'{--metrics-textfile=,--metrics_textfile=}'[write the metrics to PATH]:metrics file:_files'
    '(--debug-hangs --debug_hangs)'{--debug-hangs,--debug_hangs}'[set NCCL_DEBUG=WARN and friends in the workers]'
    '(--requeue-on-preempt --requeue_on_preempt)'{--requeue-on-preempt,--requeue_on_preempt}'[Slurm: requeue the job once on --preempt-signal]'
    '(--slurm-tasks-per-node-ok --slurm_tasks_per_node_ok)'{--slurm-tasks-per-node-ok,--slurm_tasks_per_node_ok}'[Slurm: allow several rankrun tasks per node]'
    '--check[start nothing: check that this launch would work here]'
    '*'{-v,--verbose}'[more detail from rankrun itself (repeat for more)]'

    # SCRIPT, then the script's own arguments: no rankrun option after it.
    '(-)1:script:_files'
    '(-)*::script arguments:_files'
  )
  _arguments -s -A '-*' $specs
}

# Loaded from $fpath by compinit, the file's body is the completion function; sourced, it defines
# the function and registers it.
if [[ $funcstack[1] == _rankrun ]]; then
  _rankrun "$@"
else
  compdef _rankrun rankrun
fi
