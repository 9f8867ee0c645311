# SPDX-License-Identifier: Apache-2.0
"""Swap vLLM's DeepSeek V4.1 compressor kernels for kvcompress's, in one line.

    import kvcompress.vllm
    kvcompress.vllm.patch()        # before the model runs (e.g. right after importing vllm)

``patch()`` replaces ``fused_save_compress_norm`` and ``rope_quant_insert`` in
``vllm.models.deepseek_v4_1.common.ops.fused_compress_quant_cache`` and in every loaded vLLM
module that imported those names (the compressor, the attention layer), after checking that
vLLM's functions still have the parameters ours accept (names, order, kinds, defaults, via
``inspect.signature``). It returns what it replaced, which ``unpatch()`` puts back. It raises
``VLLMPatchError`` and changes nothing when vLLM (or its V4.1 module) is missing or a
signature differs. Needs no torch itself; the ops need it when they run.
"""
import importlib
import importlib.util
import inspect
import sys
import threading

from . import _ops

OPS_MODULE = "vllm.models.deepseek_v4_1.common.ops.fused_compress_quant_cache"
# Modules known to import the two names from OPS_MODULE; imported (when present) before the
# swap so that their names are replaced too. Any other loaded vllm.* module holding the same
# function objects is found by identity.
CONSUMER_MODULES = ("vllm.models.deepseek_v4_1.compressor",)
FUNCTIONS = ("fused_save_compress_norm", "rope_quant_insert")

_lock = threading.Lock()


class VLLMPatchError(RuntimeError):
    """vLLM is absent, or its V4.1 functions are not the ones kvcompress replaces."""


def _ours(name):
    return getattr(_ops, name)


def _show(params):
    return "(" + ", ".join(str(p.replace(annotation=inspect.Parameter.empty))
                           for p in params) + ")"


def signature_mismatch(theirs, ours):
    """None when every call written for `theirs` means the same to `ours`, else why not.

    The parameters of `theirs` that can be passed by position must be those of `ours`, in
    order, with the same names, kinds and defaults (annotations are not compared); a
    keyword-only parameter of theirs must be one of ours with the same default; ours may
    add keyword-only parameters with defaults (``pdl``).
    """
    try:
        want = list(inspect.signature(theirs).parameters.values())
    except (TypeError, ValueError) as e:
        return f"its signature cannot be read ({e})"
    have = list(inspect.signature(ours).parameters.values())
    kw_only = inspect.Parameter.KEYWORD_ONLY

    def key(p):
        return (p.name, p.kind, p.default)

    problem = [key(p) for p in want if p.kind is not kw_only] != \
        [key(p) for p in have if p.kind is not kw_only]
    ours_kw = {p.name: p for p in have if p.kind is kw_only}
    for p in want:
        if p.kind is kw_only and (p.name not in ours_kw or ours_kw[p.name].default != p.default):
            problem = True
    if any(p.default is inspect.Parameter.empty for p in ours_kw.values()):
        problem = True
    return f"vLLM has {_show(want)}, kvcompress has {_show(have)}" if problem else None


def _import(name):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        root = name.split(".")[0]
        if root not in sys.modules and importlib.util.find_spec(root) is None:
            raise VLLMPatchError("kvcompress.vllm.patch: vLLM is not installed "
                                 f"(cannot import {root})") from e
        raise VLLMPatchError(f"kvcompress.vllm.patch: cannot import {name}: this vLLM has no "
                             f"DeepSeek V4.1 module there ({e})") from e


def patch(check_signatures=True):
    """Replaces vLLM's V4.1 ``fused_save_compress_norm`` / ``rope_quant_insert`` with ours.

    Returns ``{"module.name": original}`` for every replaced binding (the ops module's and
    each importer's). Calling it again is harmless (already-swapped names are left alone and
    not returned). Raises VLLMPatchError, having changed nothing, when vLLM or its V4.1
    module is missing, a function is absent, or (``check_signatures``) a signature differs.
    """
    with _lock:
        ops = _import(OPS_MODULE)
        originals = {}
        for name in FUNCTIONS:
            fn = getattr(ops, name, None)
            if fn is None:
                raise VLLMPatchError(f"kvcompress.vllm.patch: {OPS_MODULE} has no {name}")
            if fn is _ours(name):
                continue
            if check_signatures:
                why = signature_mismatch(fn, _ours(name))
                if why is not None:
                    raise VLLMPatchError(
                        f"kvcompress.vllm.patch: {OPS_MODULE}.{name} changed its signature: "
                        f"{why}; not patched")
            originals[name] = fn
        for consumer in CONSUMER_MODULES:
            try:
                importlib.import_module(consumer)
            except ImportError:
                pass  # an older or trimmed vLLM: only the modules that exist are patched
        replaced = {}
        for mod_name, mod in sorted(sys.modules.items()):
            if mod is None or not (mod_name == "vllm" or mod_name.startswith("vllm.")):
                continue
            for name, fn in originals.items():
                for attr, value in list(vars(mod).items()):
                    if value is fn:
                        setattr(mod, attr, _ours(name))
                        replaced[f"{mod_name}.{attr}"] = fn
        return replaced


def unpatch(replaced):
    """Puts back what ``patch()`` returned."""
    with _lock:
        for where, fn in replaced.items():
            mod_name, attr = where.rsplit(".", 1)
            setattr(sys.modules[mod_name], attr, fn)
