"""Network devices: mlx5 / InfiniBand port and module events, netdev carrier, bonding, ibstat.

Losing a link is an ``error`` with ``state = "DOWN"``; getting it back is ``info`` with
``state = "UP"`` (IB ``INIT``/``ARMED`` are kept as such), so the analysis can pair a node's
downs and ups into flaps. ``device`` is the NIC's PCI address when the line prints it.
"""

from __future__ import annotations

from functools import cache

import polars as pl
from toranalyze_parsers.kernel.common import PCI, event, first_of_burst, has, norm_pci

from toranalyze.parser_api import file_key

_IB_PORT = (
    rf"(?:(?P<pci>{PCI}) )?(?P<ibdev>[\w\-]+): Port: (?P<port>[0-9]+) "
    r"Link (?P<st>DOWN|INIT|ARMED|ACTIVE_DEFER|ACTIVE)\b"
)
_NETDEV = (
    rf"^(?:(?P<drv>[\w\-]+) (?P<pci>{PCI}) )?(?P<ifc>[\w.\-@]+): (?:[\w\-]+: [\w.\-@]+ )?"
    r"(?:NIC )?Link (?:is )?(?P<st>[Dd]own|[Uu]p)\b"
)
_BOND = (
    r"(?P<bond>[\w.\-]+): (?:\(slave (?P<ifc>[^)]+)\): link status definitely (?P<st>down|up)"
    r"|link status definitely (?P<st2>down|up) for interface (?P<ifc2>[\w.\-]+))"
)
_IPOIB = r"^(?P<ifc>ib\w*|ibp\w+|ibs\w+): (?:.*\s)?(?:link|carrier) (?:is )?(?P<st>down|up|lost)\b"
# A literal each link pattern needs (IB port, netdev, bonding, IPoIB, "link becomes ready"):
# NVSwitch records ('SXid …: Link 32 egress …') name links in every block of a GPU node's log.
LINK_FRAGMENTS = (
    "Port: ", "Link is ", "Link d", "Link D", "Link u", "Link U", "link status definitely", "carrier", "link is ",
    "link d", "link u", "link l", "ADDRCONF(NETDEV_CHANGE)",
)
_MLX5_FATAL = (
    r"health compromised|Driver is in error state|unrecoverable|[Ff]atal error|internal error"
    r"|cmd_exec timeout|timeout\. Will cause a leak"
)


def _state(raw: pl.Expr) -> pl.Expr:
    up = raw.str.to_uppercase()
    return (
        pl.when(up.is_in(["DOWN", "LOST"]))
        .then(pl.lit("DOWN"))
        .when(up.is_in(["UP", "ACTIVE", "ACTIVE_DEFER"]))
        .then(pl.lit("UP"))
        .otherwise(up)
    )


def _link_event(state: pl.Expr, **cols: pl.Expr) -> list[pl.Expr]:
    down = state == "DOWN"
    return event(
        pl.when(down).then(pl.lit("error")).otherwise(pl.lit("info")),
        pl.when(down).then(pl.lit("error")).otherwise(pl.lit("info")),
        state=state,
        **cols,
    )


def link_events(lf: pl.LazyFrame) -> pl.LazyFrame:
    cand_filter, groups, branches = _link_parts()
    cand = lf.filter(cand_filter).with_columns(groups)
    return pl.concat([cand.filter(keep).select(row) for keep, row in branches], how="diagonal_relaxed")


@cache
def _link_parts() -> tuple[pl.Expr, list[pl.Expr], list[tuple[pl.Expr, list[pl.Expr]]]]:
    """link_events' expressions, built once (building them cost more than running them on a
    small file): the candidate filter, the pattern groups, and each kind's (filter, row)."""
    body = pl.col("body")
    groups = [
        body.str.extract_groups(_IB_PORT).alias("_ib"),
        body.str.extract_groups(_NETDEV).alias("_nd"),
        body.str.extract_groups(_BOND).alias("_bond"),
        body.str.extract_groups(_IPOIB).alias("_ipoib"),
    ]
    f = pl.col("_nd").struct
    netdev_ok = (
        f.field("st").is_not_null()
        & (f.field("pci").is_not_null() | pl.col("k_ctx"))
        & ~has("Port: ", "pciehp", "ADDRCONF")
    )
    ready = has("ADDRCONF(NETDEV_CHANGE)") & body.str.contains(r"link becomes ready")
    bst = pl.coalesce(pl.col("_bond").struct.field("st"), pl.col("_bond").struct.field("st2"))
    ib = pl.col("_ib").struct
    branches = [
        (ib.field("st").is_not_null(), _link_event(_state(ib.field("st")), device=norm_pci(ib.field("pci")))),
        (netdev_ok, _link_event(_state(f.field("st")), device=norm_pci(f.field("pci")))),
        (bst.is_not_null(), _link_event(_state(bst))),
        (
            pl.col("_ipoib").struct.field("st").is_not_null() & pl.col("k_ctx"),
            _link_event(_state(pl.col("_ipoib").struct.field("st"))),
        ),
        (ready & pl.col("k_ctx"), _link_event(pl.lit("UP"))),
    ]
    return has("Link", "link", "carrier"), groups, branches


def mlx5_events(lf: pl.LazyFrame) -> pl.LazyFrame:
    """mlx5 device events: transceiver module, PCIe slot power, firmware health."""
    body = pl.col("body")
    pci = norm_pci(body.str.extract(rf"({PCI})", 1))
    module = body.str.contains("Port module event", literal=True)
    module_err = module & body.str.contains("Port module event[error]", literal=True)
    unplugged = module & body.str.contains("Cable unplugged", literal=True)
    power = body.str.contains("insufficient power on the PCIe slot", literal=True)
    fatal = body.str.contains(r"^mlx5_core ") & body.str.contains(_MLX5_FATAL)
    m = lf.filter(has("mlx5", "Port module event", "PCIe slot")).with_columns(
        pci.alias("_pci"),
        module_err.alias("_merr"),
        unplugged.alias("_unpl"),
        (module & ~module_err & ~unplugged).alias("_minfo"),
        power.alias("_power"),
        first_of_burst(fatal, 50).alias("_fatal"),
    )
    dev = pl.col("_pci")
    return pl.concat(
        [
            m.filter("_merr").select(event("error", "error", device=dev)),
            m.filter("_unpl").select(event("warning", "warning", device=dev)),
            m.filter("_minfo").select(event("info", "info", device=dev)),
            m.filter("_power").select(event("warning", "warning", device=dev)),
            m.filter("_fatal").select(event("error", "critical", device=dev)),
        ],
        how="diagonal_relaxed",
    )


def _port_states(lf: pl.LazyFrame) -> pl.LazyFrame:
    """ibstat's ``State:`` lines, each with its CA (_ca), port (_port), state (_state) and the
    physical state on the next line (_phys)."""
    body = pl.col("body")
    ca = body.str.extract(r"^CA '([\w\-]+)'\s*$", 1)
    port = body.str.extract(r"^\s+Port ([0-9]+):\s*$", 1)
    state = body.str.extract(r"^\s+State: (\w+)\s*$", 1)
    phys = body.str.extract(r"^\s+Physical state: (\w+)\s*$", 1)
    return lf.with_columns(
        ca.forward_fill().over(file_key()).alias("_ca"),
        # A new CA resets the port ('' until its first 'Port N:').
        pl.when(ca.is_not_null())
        .then(pl.lit(""))
        .otherwise(port)
        .forward_fill()
        .over(file_key())
        .replace("", None)
        .alias("_port"),
        state.alias("_state"),
        pl.when(pl.col("line").shift(-1) == pl.col("line") + 1).then(phys.shift(-1)).alias("_phys"),
    ).filter(pl.col("_state").is_not_null() & pl.col("_ca").is_not_null() & pl.col("_port").is_not_null())


def _ibstat_state(raw: pl.Expr) -> pl.Expr:
    """A port state as the link states name it: DOWN, UP, INIT, else upper-cased as printed."""
    st = raw.str.to_lowercase()
    return (
        pl.when(st == "down")
        .then(pl.lit("DOWN"))
        .when(st == "active")
        .then(pl.lit("UP"))
        .when(st.str.starts_with("init"))
        .then(pl.lit("INIT"))
        .otherwise(raw.str.to_uppercase())
    )


def _ibstat_port_events(lf: pl.LazyFrame) -> pl.LazyFrame:
    """One event per ibstat port: an error when down, info when active, else a warning."""
    norm = _ibstat_state(pl.col("_state"))
    level = (
        pl.when(norm == "DOWN")
        .then(pl.lit("error"))
        .when(norm == "UP")
        .then(pl.lit("info"))
        .otherwise(pl.lit("warning"))
    )
    msg = pl.format("{} port {}: State: {}", pl.col("_ca"), pl.col("_port"), pl.col("_state"))
    with_phys = (
        pl.when(pl.col("_phys").is_not_null())
        .then(pl.format("{}, Physical state: {}", msg, pl.col("_phys")))
        .otherwise(msg)
    )
    return _port_states(lf).select(
        event(
            level,
            level,
            message=with_phys,
            state=norm,
            line_end=pl.when(pl.col("_phys").is_not_null()).then(pl.col("line") + 1),
        )
    )


def _ibdev2netdev_events(lf: pl.LazyFrame) -> pl.LazyFrame:
    """One link event per ``mlx5_0 port 1 ==> ib0 (Up)`` line."""
    g = pl.col("body").str.extract_groups(
        r"^(?P<dev>[\w\-]+) port (?P<port>[0-9]+) ==> (?P<ifc>[\w.\-]+) \((?P<st>Up|Down)\)\s*$"
    )
    return (
        lf.filter(has(" ==> "))
        .with_columns(g.alias("_g"))
        .filter(pl.col("_g").struct.field("st").is_not_null())
        .select(_link_event(_state(pl.col("_g").struct.field("st"))))
    )


def ibstat_events(lf: pl.LazyFrame) -> pl.LazyFrame:
    """``ibstat`` and ``ibdev2netdev`` snapshots: one row per port with its state.

    ibstat prints ``CA 'mlx5_0'`` then per port ``Port 1:`` / ``State: Down`` /
    ``Physical state: Polling``; a port in Init or Armed carries no traffic yet (warning).
    """
    return pl.concat([_ibstat_port_events(lf), _ibdev2netdev_events(lf)], how="diagonal_relaxed")


NOISE = (
    r"PCIe slot (?:advertised sufficient power|power capability was not advertised)",
    r"^CA '[\w\-]+'\s*$|^\s+Port [0-9]+:\s*$",
    r"^\s*CA type: |^\s*Number of ports: [0-9]+$|^\s*(?:Firmware|Hardware) version: ",
    r"^\s*(?:Node|System image|Port) GUID: 0x[0-9a-f]+$",
    r"^\s*(?:Rate|Base lid|LMC|SM lid): [0-9]+$|^\s*Capability mask: 0x[0-9a-f]+$",
    r"^\s*Link layer: (?:InfiniBand|Ethernet)$|^\s*Physical state: \w+$",
    r"mlx5_core [0-9a-f:.]+: mlx5_crdump_collect|mlx5_core [0-9a-f:.]+: print_health_info",
)
