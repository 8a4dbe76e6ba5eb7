//! The configuration files of the demo's sidecar and joiner, written into the output folder
//! as a deployment would write them (so they can be read and reused), and the run's topics.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::error::{DemoError, write};
use crate::world;

/// Topic names of one run, unique so that runs against a real broker never mix.
pub(crate) struct Topics {
    pub(crate) features: String,
    pub(crate) events: String,
    pub(crate) dead_letter: String,
    pub(crate) group: String,
}

impl Topics {
    pub(crate) fn new(run: &str) -> Self {
        Self {
            features: format!("featurelog.demo.{run}.features"),
            events: format!("featurelog.demo.{run}.events"),
            dead_letter: format!("featurelog.demo.{run}.dead-letter"),
            group: format!("featurelog-demo-{run}"),
        }
    }
}

/// Writes the sidecar's allow list and `sidecar.toml` (in front of the model server at
/// `model_addr`, producing to `topics.features`); the path of `sidecar.toml`.
pub(crate) fn write_sidecar(
    out: &Path,
    model_addr: SocketAddr,
    bootstrap: &str,
    topics: &Topics,
) -> Result<PathBuf, DemoError> {
    let allow_list = out.join("allow-list.toml");
    write(
        &allow_list,
        &format!(
            "# What the demo's sidecar logs: 7 of the request's 9 feature tensors, the ids and\n\
             # the score.\n[[model]]\nname = \"{}\"\nfeatures = [{}]\noutputs = [\"score\"]\n\
             candidate-ids-input = \"item_id\"\n",
            world::MODEL,
            world::LOGGED_FEATURES
                .iter()
                .map(|f| format!("\"{f}\""))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    )?;
    let sidecar_toml = out.join("sidecar.toml");
    write(
        &sidecar_toml,
        &format!(
            "listen = \"127.0.0.1:0\"\nupstream = \"http://{model_addr}\"\nmode = \"log\"\n\
             instance = \"demo\"\nallow-list = \"allow-list.toml\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n\
             [kafka]\nbootstrap-servers = \"{bootstrap}\"\n[publish]\ntopic = \"{}\"\n",
            topics.features
        ),
    )?;
    Ok(sidecar_toml)
}

/// Writes `join.toml`; `embedded`: the broker is the embedded one. Its path.
pub(crate) fn write_joiner(
    out: &Path,
    bootstrap: &str,
    topics: &Topics,
    embedded: bool,
) -> Result<PathBuf, DemoError> {
    // The joiner: a short label window, so that the demo's rows are final seconds after its
    // traffic. The waits stay long: on a fresh broker the router's first transaction can take
    // seconds (the transaction coordinator loads), and with the idle timeout moving the
    // watermark on the wall clock meanwhile, waits shorter than that expired the features
    // before their impressions came through (rows lost to the windows, as configured).
    let join_toml = out.join("join.toml");
    write(
        &join_toml,
        &format!(
            "group = \"{group}\"\ninstance = \"demo\"\n[kafka]\nbootstrap-servers = \"{bootstrap}\"\n\
             [input]\nfeatures-topic = \"{features}\"\nevents-topic = \"{events}\"\n\
             events-format = \"json\"\ndead-letter-topic = \"{dlq}\"\n\
             [input.json-fields]\nevent-id = \"event_id\"\n\
             [join]\nfeatures-wait = \"1m\"\nimpressions-wait = \"1m\"\nlabel-window = \"2s\"\n\
             max-out-of-orderness = \"0s\"\nidle-timeout = \"1s\"\n{held_logs}\
             [output]\npath = \"dataset\"\nflush-interval = \"1s\"\n\
             [metrics]\nlisten = \"127.0.0.1:0\"\n",
            group = topics.group,
            features = topics.features,
            events = topics.events,
            dlq = topics.dead_letter,
            // The embedded broker answers no DescribeConfigs: asking it for the topic's
            // retention (`auto`) only waited 10 s for a timeout before choosing this.
            held_logs = if embedded {
                "held-logs = \"state-files\"\n"
            } else {
                ""
            },
        ),
    )?;
    Ok(join_toml)
}
