def second_grad_grad(x):
    out, bprop = second_grad_fprop(x)
    dout = _rt.ones_like_value(out)
    _, d_x = bprop(dout)
    _t1 = _rt.input_grad(d_x, x)
    return _t1


def second_grad_fprop(x):
    _t1, bp = second_fprop_fprop(x)
    out, bprop = _t1
    dout = _rt.ones_like_value(out)
    _t2, bp_1 = bprop(dout)
    _, d_x = _t2
    _t3 = _rt.input_grad(d_x, x)
    def second_grad_bprop(dout_1):
        _t4 = _rt.getitem_grad(_t2, 1, dout_1)
        d_bprop, *_ = bp_1(_t4)
        _t5 = _rt.getitem_grad(_t1, 1, d_bprop)
        env_fprop, _t6 = bp(_t5)
        _t7 = (env_fprop, _t6)
        return _t7
    _t8 = (_t3, second_grad_bprop)
    return _t8


def second_fprop_fprop(x):
    # line 70: s = x * x
    s = x * x
    # line 71: return jnp.sin(s) * x
    _t1 = jnp.sin(s)
    _t2 = _t1 * x
    def second_bprop_fprop(dout):
        # line 71: return jnp.sin(s) * x
        _t3 = dout * x
        _t4 = _rt.sum_to(_t3, _t1)
        _t5 = dout * _t1
        _t6 = _rt.sum_to(_t5, x)
        _t7 = jnp.cos(s)
        d_s = _t4 * _t7
        # line 70: s = x * x
        _t8 = d_s * x
        _t9 = _rt.sum_to(_t8, x)
        _t10 = d_s * x
        _t11 = _rt.sum_to(_t10, x)
        _t12 = _rt.add_grad(_t6, _t9)
        # line 69: def second(x):
        d_x = _rt.add_grad(_t12, _t11)
        _t13 = (EMPTY_ENV, d_x)
        def second_bprop_bprop(dout_1):
            _t14 = dout_1[1]
            # grad of line 70: s = x * x
            _t15 = (tuple, list)
            _t16 = isinstance(_t10, _t15)
            _t17, _t18 = _rt.switch(_t16, bprop_if257_true, bprop_if257_false, _t10, x, _t14, where='<root>/k_transform/bprop_registry/structural.py:257')
            _t19 = {'second_fprop@69:x': _t18}
            _t20 = _t17 * x
            _t21 = _rt.sum_to(_t20, d_s)
            _t22 = _t17 * d_s
            _t23 = _rt.sum_to(_t22, x)
            _t24 = {'second_fprop@69:x': _t23}
            _t25 = _rt.add_grad(_t19, _t24)
            _t26 = (tuple, list)
            _t27 = isinstance(_t8, _t26)
            _t28, _t29 = _rt.switch(_t27, bprop_if257_true, bprop_if257_false, _t8, x, _t14, where='<root>/k_transform/bprop_registry/structural.py:257')
            _t30 = {'second_fprop@69:x': _t29}
            _t31 = _rt.add_grad(_t25, _t30)
            _t32 = _t28 * x
            _t33 = _rt.sum_to(_t32, d_s)
            _t34 = _t28 * d_s
            _t35 = _rt.sum_to(_t34, x)
            _t36 = {'second_fprop@69:x': _t35}
            _t37 = _rt.add_grad(_t31, _t36)
            # grad of line 71: return jnp.sin(s) * x
            d_d_s = _rt.add_grad(_t21, _t33)
            _t38 = d_d_s * _t7
            _t39 = _rt.sum_to(_t38, _t4)
            _t40 = d_d_s * _t4
            _t41 = _rt.sum_to(_t40, _t7)
            _t42 = jnp.sin(s)
            _t43 = -_t42
            _t44 = _t41 * _t43
            _t45 = {'second_fprop@69:s': _t44}
            _t46 = _rt.add_grad(_t37, _t45)
            _t47 = (tuple, list)
            _t48 = isinstance(_t5, _t47)
            _t49, _t50 = _rt.switch(_t48, bprop_if257_true, bprop_if257_false, _t5, x, _t14, where='<root>/k_transform/bprop_registry/structural.py:257')
            _t51 = {'second_fprop@69:x': _t50}
            _t52 = _rt.add_grad(_t46, _t51)
            _t53 = _t49 * _t1
            _t54 = _rt.sum_to(_t53, dout)
            _t55 = _t49 * dout
            _t56 = _rt.sum_to(_t55, _t1)
            _t57 = {'second_fprop@69:v': _t56}
            _t58 = _rt.add_grad(_t52, _t57)
            _t59 = (tuple, list)
            _t60 = isinstance(_t3, _t59)
            _t61, _t62 = _rt.switch(_t60, bprop_if257_true, bprop_if257_false, _t3, _t1, _t39, where='<root>/k_transform/bprop_registry/structural.py:257')
            _t63 = {'second_fprop@69:v': _t62}
            _t64 = _rt.add_grad(_t58, _t63)
            _t65 = _t61 * x
            _t66 = _rt.sum_to(_t65, dout)
            _t67 = _t61 * dout
            _t68 = _rt.sum_to(_t67, x)
            _t69 = {'second_fprop@69:x': _t68}
            _t70 = _rt.add_grad(_t64, _t69)
            d_dout = _rt.add_grad(_t54, _t66)
            _t71 = (_t70, d_dout)
            return _t71
        _t72 = (_t13, second_bprop_bprop)
        return _t72
    _t73 = (_t2, second_bprop_fprop)
    def second_fprop_bprop(dout_2):
        _t74 = dout_2[0]
        _t75 = dout_2[1]
        # grad of line 71: return jnp.sin(s) * x
        _t76 = _t74 * x
        _t77 = _rt.sum_to(_t76, _t1)
        _t78 = _t74 * _t1
        _t79 = _rt.sum_to(_t78, x)
        _t80 = _rt.env_get(_t75, 'second_fprop@69:v', _t1)
        _t81 = _rt.env_del(_t75, 'second_fprop@69:v')
        _t82 = _rt.add_grad(_t77, _t80)
        _t83 = jnp.cos(s)
        _t84 = _t82 * _t83
        _t85 = _rt.env_get(_t81, 'second_fprop@69:s', s)
        _t86 = _rt.env_del(_t81, 'second_fprop@69:s')
        # grad of line 70: s = x * x
        _t87 = _rt.add_grad(_t84, _t85)
        _t88 = _t87 * x
        _t89 = _rt.sum_to(_t88, x)
        _t90 = _t87 * x
        _t91 = _rt.sum_to(_t90, x)
        _t92 = _rt.env_get(_t86, 'second_fprop@69:x', x)
        _t93 = _rt.env_del(_t86, 'second_fprop@69:x')
        _t94 = _rt.add_grad(_t79, _t89)
        _t95 = _rt.add_grad(_t94, _t91)
        # grad of line 69: def second(x):
        _t96 = _rt.add_grad(_t95, _t92)
        _t97 = (_t93, _t96)
        return _t97
    _t98 = (_t73, second_fprop_bprop)
    return _t98


def bprop_if257_true(g, like, dout):
    # line 258: rest = zeros_value(g[: len(g) - len(like)] if tail else g[len(like) :])
    _t1 = len(like)
    _t2 = slice(_t1, None, None)
    _t3 = g[_t2]
    rest = _rt.zeros_like_value(_t3)
    # line 259: return (rest + dout if tail else dout + rest), None
    _t4 = dout + rest
    _t5 = (_t4, None)
    return _t5


def bprop_if257_false(g, like, dout):
    # line 260: return _broadcast_like(dout, g), None
    _t1 = _broadcast_like(dout, g)
    _t2 = (_t1, None)
    return _t2


def _broadcast_like(d, g):
    # line 269: return jnp.broadcast_to(d, jnp.shape(g)) if d is not None else None
    _t1 = d is not None
    def _broadcast_like_ifexp269_false(d_1, g_1):
        return None
    def _broadcast_like_ifexp269_true(d_2, g_2):
        # line 269: return jnp.broadcast_to(d, jnp.shape(g)) if d is not None else None
        _t2 = jnp.shape(g_2)
        _t3 = jnp.broadcast_to(d_2, _t2)
        return _t3
    _t4 = _rt.switch(_t1, _broadcast_like_ifexp269_true, _broadcast_like_ifexp269_false, d, g, where='<root>/k_transform/bprop_registry/structural.py:269')
    return _t4
