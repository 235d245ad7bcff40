"""What generated code calls at run time (imported there as `_rt`).

One module per concern; this package re-exports their public names so that
generated code and `rt.<name>` read as one namespace:

- `values`: `UNDEFINED`, gradient values and their arithmetic (`add_grad`, `fit`)
- `python`: Python semantics (operators, f-strings, list mutation, iteration)
- `state`: parameters and `assign`
- `rules`: helpers of gradient rules (`sum_to` and its transpose `spread_like`,
  `getitem_grad`, `items_grad`)
- `stack`: the stacks K of a loop pushes its iterations on
- `bounds`: the bound of traced `while` loops that store iterations
- `trees`: item `i` of pytrees of arrays (the models of `lax.scan`, `jax.vmap`)

The control flow itself (`switch`, loops) is `k_transform.control.runtime`.
"""

from k_transform.runtime.bounds import (  # noqa: F401
    DEFAULT_LOOP_BOUND,
    EAGER_GROWTHS,
    LoopBoundExceeded,
    bounded_loops,
    check_bound,
    count_iteration,
    loop_bound,
    set_loop_bound,
)
from k_transform.runtime.python import (  # noqa: F401
    NO_CAUSE,
    Formatted,
    array_index,
    as_sequence,
    assert_,
    assigned_span,
    bind_inputs,
    bind_inputs_grad,
    check_star_args,
    check_unpack,
    copy_value,
    dict_display,
    dict_ior,
    dict_keys,
    dict_or,
    dict_updated,
    each_count,
    fstring,
    indices,
    insert_position,
    iterated,
    iterated_grad,
    keys_unfilled,
    keys_within,
    list_append,
    list_delete,
    list_extend,
    list_insert,
    not_,
    pop_position,
    print_,
    raise_,
    raised_at_run_time,
    seq_len,
    setitem,
    sized_len,
    sort_method,
    static_filter,
    to_bool,
    to_int,
    to_list,
    to_tuple,
    trip_count,
    truth_all,
    truth_any,
    written,
    zip_length,
    zip_limit,
    zip_strict_end,
    zip_strict_length,
)
from k_transform.runtime.rules import (  # noqa: F401
    getitem_grad,
    grad_item,
    grad_items,
    items_grad,
    items_grad_of,
    mul_grad,
    spread_like,
    sum_to,
)
from k_transform.runtime.stack import (  # noqa: F401
    BufStack,
    PyStack,
    add_stacks,
    check_stacks,
    heavy,
    is_stack,
    light,
    promote,
    stack_new,
    stack_nonempty,
    stack_pop,
    stack_push,
)
from k_transform.runtime.state import (  # noqa: F401
    assign,
    attr_env,
    attr_env_t,
    param_env,
    param_env_t,
    param_scope,
    read_param,
    refuse_lost_bprop,
)
from k_transform.runtime.trees import (  # noqa: F401
    batch_size,
    jacobian_blocks,
    jacobian_matrix,
    ravel_rows,
    scan_length,
    tree_index,
    tree_index_at,
    tree_put,
    tree_put_at,
    tree_set,
    tree_size,
    tree_stack_at,
    unravel_rows,
)
from k_transform.runtime.values import (  # noqa: F401
    UNDEFINED,
    GradValue,
    add_grad,
    any_traced,
    as_jax_inputs,
    aux_sens,
    check_grad,
    check_tangent,
    env_del,
    env_get,
    fields_of,
    fit,
    input_grad,
    is_tracer,
    join_aux,
    ones_like_value,
    pytree_node,
    rebuild,
    replace_fields,
    restrict_grad,
    scalar_sens,
    split_aux,
    zeros_like_value,
)
