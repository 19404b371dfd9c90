//! The hash map of the sweep's hot paths: foldhash with a fixed seed, so
//! that nothing depends on a random state (output never follows hash-map
//! order anyway: everything the model holds is sorted).

use std::collections::HashMap;

pub type FastMap<K, V> = HashMap<K, V, foldhash::fast::FixedState>;
