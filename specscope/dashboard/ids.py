"""Every component id of the dashboard, in one place."""

URL = "url"
TICK = "tick"
PAGE = "page"
RUNS = "runs"
BANNER = "anomaly-banner"
SOURCE_INFO = "source-info"
OPEN_PATH = "open-path"
OPEN_BUTTON = "open-button"
OPEN_STATUS = "open-status"
RANKS = "ranks"
NODES = "nodes"  #: the node selector: a fleet's runs per node

LIVE_ACCEPTANCE = "live-acceptance"
LIVE_POSITION = "live-per-position"
LIVE_HIST = "live-accept-hist"
LIVE_THROUGHPUT = "live-throughput"
LIVE_LATENCY = "live-latency"

TRUTH_FIGURE = "truth-figure"
TRUTH_MODES = "truth-modes"
TRUTH_PROBE = "truth-probe"  #: the black-box probe runs among the selected ones
TRUTH_FALLBACKS = "truth-fallbacks"
TRUTH_BY_BATCH = "truth-by-batch"

COMPARE_TABLE = "compare-table"
COMPARE_NOTE = "compare-note"
COMPARE_POSITION = "compare-per-position"
COMPARE_CDF_TTFT = "compare-cdf-ttft"
COMPARE_CDF_TPOT = "compare-cdf-tpot"
COMPARE_CATEGORIES = "compare-categories"

SWEEP_FIGURE = "sweep-pareto"
SWEEP_TABLE = "sweep-table"
ADVISOR_FIGURE = "advisor-figure"
ADVISOR_TABLE = "advisor-table"
ADVISOR_NOTE = "advisor-note"

REGRESSION_FIGURE = "regression-figure"
REGRESSION_TABLE = "regression-table"

PROFILE_FIGURE = "profile-figure"
PROFILE_TABLE = "profile-table"
PROFILE_BUTTON = "profile-download-button"
PROFILE_DOWNLOAD = "profile-download"

ACCURACY_REFERENCE = "accuracy-reference"
ACCURACY_TABLE = "accuracy-table"
ACCURACY_GATES = "accuracy-gates"
ACCURACY_DIVERGE = "accuracy-diverge"
ACCURACY_DIVERGE_TABLE = "accuracy-diverge-table"
ACCURACY_WORST = "accuracy-worst"

REQUESTS_FIGURE = "requests-distribution"
REQUESTS_TABLE = "requests-table"
REQUESTS_PICK = "requests-pick"
REQUESTS_TIMELINE = "requests-timeline"
REQUESTS_CONTEXT = "requests-context"
