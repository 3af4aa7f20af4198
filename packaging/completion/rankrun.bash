# bash completion for rankrun(1): installed as share/bash-completion/completions/rankrun, and
# printed by `rankrun --print-completion bash`.
# Completes rankrun's options (torchrun's in both the dashed and the underscored spelling),
# the values of those that take a fixed set, and files once SCRIPT is reached: everything
# after SCRIPT belongs to the script and is completed as file names.

_rankrun()
{
    local cur prev words cword
    if declare -F _init_completion >/dev/null 2>&1; then
        _init_completion -s || return
    else
        COMPREPLY=()
        cur=${COMP_WORDS[COMP_CWORD]}
        prev=${COMP_WORDS[COMP_CWORD-1]}
        words=("${COMP_WORDS[@]}")
        cword=$COMP_CWORD
    fi

    # Options that take a value (as a separate word or after '=').
    local with_value='--nproc-per-node --nproc_per_node --nnodes --node-rank --node_rank
        --master-addr --master_addr --master-port --master_port --role --max-restarts
        --max_restarts --monitor-interval --monitor_interval --start-method --start_method
        --log-dir --log_dir -r --redirects -t --tee --local-ranks-filter --local_ranks_filter
        --rdzv-backend --rdzv_backend --rdzv-endpoint --rdzv_endpoint --rdzv-id --rdzv_id
        --rdzv-conf --rdzv_conf --local-addr --local_addr --gpus --term-timeout --term_timeout
        --node-timeout --node_timeout --store-protocol --store_protocol --exit-timeout
        --exit_timeout --heartbeat-timeout --heartbeat_timeout --progress-timeout
        --progress_timeout --straggler-timeout --straggler_timeout --store-memory --store_memory --store-connections-per-address --store_connections_per_address --init-timeout --init_timeout --preempt-signal --preempt_signal
        --gpu-check --gpu_check --gpu-release-timeout --gpu_release_timeout --events --metrics-port
        --metrics_port --metrics-textfile --metrics_textfile --shutdown-timeout --shutdown_timeout
        --signals-to-handle --signals_to_handle --duplicate-stdout-filters --duplicate_stdout_filters
        --duplicate-stderr-filters --duplicate_stderr_filters --log-line-prefix-template
        --log_line_prefix_template --event-log-handler --event_log_handler --logs-specs --logs_specs
        --numa-binding --numa_binding --numa-memory --numa_memory --print-completion --print_completion'
    local flags='-h --help --version --standalone -m --module --no-python --no_python
        --run-path --run_path --virtual-local-rank --virtual_local_rank --no-pin --no_pin
        --debug-hangs --debug_hangs --requeue-on-preempt --requeue_on_preempt
        --slurm-tasks-per-node-ok --slurm_tasks_per_node_ok --check -v --verbose'

    # Past SCRIPT (the first word that is neither an option nor an option's value), every
    # word is the script's: complete file names only.
    local i w
    for ((i = 1; i < cword; i++)); do
        w=${words[i]}
        case $w in
            --*=*) ;;
            -*)
                if [[ " ${with_value//$'\n'/ } " == *" $w "* ]]; then
                    # Without bash-completion's helpers, '--opt=value' arrives as three words.
                    [[ ${words[i+1]-} == = ]] && ((i++))
                    ((i++))
                fi
                ;;
            *)
                compopt -o default 2>/dev/null
                COMPREPLY=()
                return
                ;;
        esac
    done

    local opt=$prev value=$cur
    if [[ $cur == --*=* ]]; then
        opt=${cur%%=*}
        value=${cur#*=}
    elif [[ $cur == = ]]; then
        opt=$prev
        value=
    elif [[ $prev == = ]] && ((cword >= 2)); then
        opt=${words[cword-2]}
    fi
    local choices=
    case $opt in
        --nproc-per-node | --nproc_per_node) choices='gpu cpu auto 1 2 4 8' ;;
        --store-protocol | --store_protocol) choices='auto 1.13 2.1 2.2' ;;
        --preempt-signal | --preempt_signal) choices='SIGUSR1 SIGUSR2' ;;
        --rdzv-backend | --rdzv_backend) choices='static c10d etcd' ;;
        --gpu-check | --gpu_check) choices='warn refuse off' ;;
        --start-method | --start_method) choices='spawn fork forkserver' ;;
        -r | --redirects | -t | --tee) choices='0 1 2 3' ;;
        --event-log-handler | --event_log_handler) choices='null console' ;;
        --numa-binding | --numa_binding) choices='node socket exclusive core-complex' ;;
        --numa-memory | --numa_memory) choices='none preferred' ;;
        --print-completion | --print_completion) choices='bash zsh tcsh' ;;
        --log-dir | --log_dir)
            COMPREPLY=($(compgen -d -- "$value"))
            compopt -o filenames 2>/dev/null
            return
            ;;
        --master-addr | --master_addr | --local-addr | --local_addr | --rdzv-endpoint | --rdzv_endpoint)
            COMPREPLY=($(compgen -A hostname -- "$value"))
            return
            ;;
    esac
    if [[ -n $choices ]]; then
        COMPREPLY=($(compgen -W "$choices" -- "$value"))
        return
    fi
    if [[ $cur != --*=* && " ${with_value//$'\n'/ } " == *" $opt "* ]]; then
        # A free-form value (a number, a list, an id): nothing sensible to offer.
        COMPREPLY=()
        return
    fi

    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$flags $with_value" -- "$cur"))
        # An option that takes a value completes with '=' and no space after it.
        if ((${#COMPREPLY[@]} == 1)) && [[ " ${with_value//$'\n'/ } " == *" ${COMPREPLY[0]} "* && ${COMPREPLY[0]} == --* ]]; then
            COMPREPLY=("${COMPREPLY[0]}=")
            compopt -o nospace 2>/dev/null
        fi
        return
    fi
    # SCRIPT itself: a file.
    compopt -o default 2>/dev/null
    COMPREPLY=()
} && complete -F _rankrun rankrun
