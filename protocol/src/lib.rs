//! Wire codecs.
