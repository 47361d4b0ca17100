//! Responses to commands sent with `response_required`, and the Java exceptions they carry.

use super::DataStructure;
use crate::openwire::marshal::wire_struct;

wire_struct! {
    /// The command with id `correlation_id` succeeded.
    pub struct Response (command) {
        /// The `command_id` of the command answered.
        correlation_id: i32 = Int,
    }
}

wire_struct! {
    /// The command with id `correlation_id` failed; the client throws `exception`.
    pub struct ExceptionResponse (command) {
        /// The `command_id` of the command answered.
        correlation_id: i32 = Int,
        /// What went wrong.
        exception: Option<Throwable> = Throwable,
    }
}

wire_struct! {
    /// A response carrying one data structure.
    pub struct DataResponse (command) {
        /// The `command_id` of the command answered.
        correlation_id: i32 = Int,
        /// The data.
        data: Option<Box<DataStructure>> = Nested,
    }
}

wire_struct! {
    /// A response carrying several data structures.
    pub struct DataArrayResponse (command) {
        /// The `command_id` of the command answered.
        correlation_id: i32 = Int,
        /// The data.
        data: Option<Vec<DataStructure>> = Array,
    }
}

wire_struct! {
    /// A response carrying a number.
    pub struct IntegerResponse (command) {
        /// The `command_id` of the command answered.
        correlation_id: i32 = Int,
        /// The number.
        result: i32 = Int,
    }
}

/// A Java exception as OpenWire carries it: the client re-creates it by class name (a
/// `javax.jms.JMSException` subclass such as `javax.jms.InvalidDestinationException`, or a
/// `java.lang` one). The stack trace and cause are on the wire only when the negotiated
/// format has `StackTraceEnabled`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Throwable {
    /// The fully qualified Java class name.
    pub class_name: String,
    /// The exception message.
    pub message: Option<String>,
    /// Stack frames, innermost first.
    pub stack_trace: Vec<StackTraceElement>,
    /// The cause.
    pub cause: Option<Box<Throwable>>,
}

impl Throwable {
    /// An exception of class `class_name` with `message`, no stack trace.
    pub fn new(class_name: impl Into<String>, message: impl Into<String>) -> Throwable {
        Throwable {
            class_name: class_name.into(),
            message: Some(message.into()),
            stack_trace: Vec::new(),
            cause: None,
        }
    }
}

/// One frame of a Java stack trace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct StackTraceElement {
    /// The declaring class.
    pub class_name: Option<String>,
    /// The method.
    pub method_name: Option<String>,
    /// The source file.
    pub file_name: Option<String>,
    /// The line (negative when unknown).
    pub line_number: i32,
}
