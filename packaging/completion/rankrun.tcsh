# tcsh completion for rankrun(1): installed as share/rankrun/completion/rankrun.tcsh, and printed
# by `rankrun --print-completion tcsh`. Source it from ~/.tcshrc, e.g.
#   source /usr/share/rankrun/completion/rankrun.tcsh
# Completes rankrun's options (torchrun's in both the dashed and the underscored spelling), the
# values of those that take a fixed set (after a space or after '='), and file names otherwise.
# tcsh's rules cannot tell where SCRIPT is, so a word starting with '-' after SCRIPT is still
# offered rankrun's options; every other word after SCRIPT is completed as a file name.

set _rankrun_options = ( \
    -h --help --version --print-completion --print_completion \
    --nproc-per-node --nproc_per_node --nnodes --node-rank --node_rank \
    --master-addr --master_addr --master-port --master_port --standalone \
    -m --module --no-python --no_python --run-path --run_path --role \
    --max-restarts --max_restarts --monitor-interval --monitor_interval \
    --start-method --start_method --log-dir --log_dir -r --redirects -t --tee \
    --local-ranks-filter --local_ranks_filter --rdzv-backend --rdzv_backend \
    --rdzv-endpoint --rdzv_endpoint --rdzv-id --rdzv_id --rdzv-conf --rdzv_conf \
    --local-addr --local_addr --virtual-local-rank --virtual_local_rank \
    --shutdown-timeout --shutdown_timeout --signals-to-handle --signals_to_handle \
    --duplicate-stdout-filters --duplicate_stdout_filters \
    --duplicate-stderr-filters --duplicate_stderr_filters \
    --log-line-prefix-template --log_line_prefix_template \
    --event-log-handler --event_log_handler --logs-specs --logs_specs \
    --numa-binding --numa_binding --numa-memory --numa_memory \
    --gpus --no-pin --no_pin --term-timeout --term_timeout --node-timeout --node_timeout \
    --store-protocol --store_protocol --exit-timeout --exit_timeout \
    --heartbeat-timeout --heartbeat_timeout --progress-timeout --progress_timeout \
    --straggler-timeout --straggler_timeout --store-memory --store_memory \
    --store-connections-per-address --store_connections_per_address \
    --init-timeout --init_timeout --preempt-signal --preempt_signal \
    --gpu-check --gpu_check --gpu-release-timeout --gpu_release_timeout --events \
    --metrics-port --metrics_port --metrics-textfile --metrics_textfile \
    --debug-hangs --debug_hangs --requeue-on-preempt --requeue_on_preempt \
    --slurm-tasks-per-node-ok --slurm_tasks_per_node_ok --check -v --verbose \
)

# Rules are tried in order: the '--option=value' forms before the list of options.
complete rankrun \
    'c/--nproc[-_]per[-_]node=/(gpu cpu auto 1 2 4 8)/' \
    'c/--store[-_]protocol=/(auto 1.13 2.1 2.2)/' \
    'c/--preempt[-_]signal=/(SIGUSR1 SIGUSR2)/' \
    'c/--rdzv[-_]backend=/(static c10d etcd)/' \
    'c/--gpu[-_]check=/(warn refuse off)/' \
    'c/--start[-_]method=/(spawn fork forkserver)/' \
    'c/{--redirects,--tee}=/(0 1 2 3)/' \
    'c/--event[-_]log[-_]handler=/(null console)/' \
    'c/--numa[-_]binding=/(node socket exclusive core-complex)/' \
    'c/--numa[-_]memory=/(none preferred)/' \
    'c/--print[-_]completion=/(bash zsh tcsh)/' \
    'c/--log[-_]dir=/d/' \
    'C/-/$_rankrun_options/' \
    'n/--nproc[-_]per[-_]node/(gpu cpu auto 1 2 4 8)/' \
    'n/--store[-_]protocol/(auto 1.13 2.1 2.2)/' \
    'n/--preempt[-_]signal/(SIGUSR1 SIGUSR2)/' \
    'n/--rdzv[-_]backend/(static c10d etcd)/' \
    'n/--gpu[-_]check/(warn refuse off)/' \
    'n/--start[-_]method/(spawn fork forkserver)/' \
    'n/{-r,--redirects,-t,--tee}/(0 1 2 3)/' \
    'n/--event[-_]log[-_]handler/(null console)/' \
    'n/--numa[-_]binding/(node socket exclusive core-complex)/' \
    'n/--numa[-_]memory/(none preferred)/' \
    'n/--print[-_]completion/(bash zsh tcsh)/' \
    'n/--log[-_]dir/d/' \
    'n/{--*[-_]timeout,--monitor[-_]interval}/x:<seconds>/' \
    'n/{--nnodes,--node[-_]rank,--master[-_]addr,--master[-_]port,--role,--max[-_]restarts,--local[-_]ranks[-_]filter,--rdzv[-_]endpoint,--rdzv[-_]id,--rdzv[-_]conf,--local[-_]addr,--gpus,--store[-_]memory,--store[-_]connections[-_]per[-_]address,--metrics[-_]port,--signals[-_]to[-_]handle,--duplicate[-_]stdout[-_]filters,--duplicate[-_]stderr[-_]filters,--log[-_]line[-_]prefix[-_]template,--logs[-_]specs}/x:<value>/' \
    'p/*/f/'
