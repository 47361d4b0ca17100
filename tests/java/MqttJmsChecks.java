import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import javax.jms.BytesMessage;
import javax.jms.Connection;
import javax.jms.DeliveryMode;
import javax.jms.JMSException;
import javax.jms.Message;
import javax.jms.MessageConsumer;
import javax.jms.MessageProducer;
import javax.jms.Session;
import javax.jms.TextMessage;
import javax.jms.Topic;

import org.apache.activemq.ActiveMQConnectionFactory;

/**
 * The JMS halves of the MQTT cross-protocol checks (tests/tests/integration/mqtt_cross.rs) and
 * of the browser test (tests/tests/integration/browser.rs), with the real ActiveMQ 5.x JMS
 * client; the other halves are tests/python/mqtt_cross_checks.py (paho-mqtt) and
 * tests/browser/page.js (mqtt.js, stomp.js).
 *
 * <pre>
 *   java -cp $FERROMQ_JMS_CLASSPATH MqttJmsChecks --url tcp://127.0.0.1:61616 --check mqtt_to_jms
 * </pre>
 *
 * A receiving check prints "ready" once its consumers exist (the caller starts the other half
 * then) and "ok CHECK" once everything expected arrived; on a failure it prints
 * "FAIL CHECK: why" and exits 1. The payloads and properties are fixed here and in
 * mqtt_cross_checks.py / page.js: keep them equal.
 */
public final class MqttJmsChecks {
    /** How long a message that should arrive may take. */
    static final long RECEIVE_MS = 15_000;
    /** How long to wait to be confident that a message does not arrive. */
    static final long QUIET_MS = 700;
    /** The program gives up after this long; callers kill it at 180 s. */
    static final long WATCHDOG_MS = 160_000;

    static final List<String> CHECKS = List.of("mqtt_to_jms", "jms_to_mqtt", "durable_subscribe",
            "durable_resume_and_send", "browser");

    /** Every byte value, then back down (mqtt_cross_checks.py's BINARY). */
    static final byte[] BINARY = binary();
    /** mqtt_cross_checks.py's TEXT. */
    static final String TEXT = "h\u00e9llo \u2713";
    static final String UNICODE = "\u00fcn\u00ef \u2713";

    /** The durable subscription of the away checks. */
    static final String DURABLE_CLIENT_ID = "jms-away";
    static final String DURABLE_NAME = "away";

    /** The browser check's names and payloads (browser.rs and page.js). */
    static final byte[] MQTT_PREFIX = {0x00, 0x01, (byte) 0xfe, (byte) 0xff};
    static final String MQTT_V4_TEXT = "mqtt.js 3.1.1 \u2192 ferromq \u2713";
    static final String MQTT_V5_TEXT = "mqtt.js 5.0 \u2192 ferromq \u2713";
    static final String STOMP_TEXT = "stomp.js 1.2 \u2192 ferromq \u2713";
    static final String TO_MQTT_TEXT = "JMS \u2192 mqtt.js \u2713";
    static final byte[] TO_MQTT_BYTES = {0x00, (byte) 0xff, (byte) 0x80, 0x7f, 0x0d, 0x0a};
    static final String TO_STOMP_TEXT = "JMS \u2192 stomp.js \u2713";

    static final class CheckFailed extends RuntimeException {
        private static final long serialVersionUID = 1L;

        CheckFailed(String message) {
            super(message);
        }
    }

    final String url;
    final List<Connection> connections = new ArrayList<>();

    MqttJmsChecks(String url) {
        this.url = url;
    }

    static byte[] binary() {
        byte[] bytes = new byte[512];
        for (int i = 0; i < 256; i++) {
            bytes[i] = (byte) i;
            bytes[511 - i] = (byte) i;
        }
        return bytes;
    }

    public static void main(String[] args) {
        if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
            System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        }
        String url = null;
        String check = null;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--url" -> url = i + 1 < args.length ? args[++i] : null;
                case "--check" -> check = i + 1 < args.length ? args[++i] : null;
                default -> usage("unknown argument " + args[i]);
            }
        }
        if (url == null || check == null || !CHECKS.contains(check)) {
            usage("--url and --check (one of " + String.join(", ", CHECKS) + ") are required");
        }
        startWatchdog(check);
        MqttJmsChecks checks = new MqttJmsChecks(url);
        int status;
        try {
            checks.run(check);
            System.out.println("ok " + check);
            status = 0;
        } catch (CheckFailed failure) {
            System.out.println("FAIL " + check + ": " + failure.getMessage());
            failure.printStackTrace();
            status = 1;
        } catch (Throwable unexpected) {
            System.out.println("FAIL " + check + ": unexpected " + unexpected);
            unexpected.printStackTrace();
            status = 1;
        } finally {
            checks.closeAll();
        }
        System.out.flush();
        System.exit(status);
    }

    static void usage(String problem) {
        System.err.println(problem);
        System.err.println("usage: MqttJmsChecks --url BROKER_URL --check CHECK");
        System.exit(2);
    }

    static void startWatchdog(String check) {
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(WATCHDOG_MS);
            } catch (InterruptedException e) {
                return;
            }
            System.out.println("FAIL " + check + ": still running after " + WATCHDOG_MS / 1000 + " s");
            System.out.flush();
            Runtime.getRuntime().halt(3);
        }, "watchdog");
        watchdog.setDaemon(true);
        watchdog.start();
    }

    void run(String check) throws Exception {
        switch (check) {
            case "mqtt_to_jms" -> mqttToJms();
            case "jms_to_mqtt" -> jmsToMqtt();
            case "durable_subscribe" -> durableSubscribe();
            case "durable_resume_and_send" -> durableResumeAndSend();
            case "browser" -> browser();
            default -> throw new CheckFailed("unknown check " + check);
        }
    }

    // ---------------------------------------------------------------------------------------
    // Checks

    /**
     * mqtt_to_jms: subscribers of topic a.b and of the wildcard a.&gt; get what
     * mqtt_cross_checks.py's publish_for_jms publishes to MQTT a/b, in order, as BytesMessages
     * with the payloads exact: QoS 0 non-persistent, QoS 1 and 2 persistent, with the QoS in
     * ActiveMQ.MQTT.QoS, 5.0 user properties as string properties, the response topic as
     * JMSReplyTo, correlation data as JMSCorrelationID and the expiry interval as JMSExpiration.
     */
    void mqttToJms() throws Exception {
        Session session = connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
        Topic exact = session.createTopic("a.b");
        MessageConsumer[] consumers = {session.createConsumer(exact),
                session.createConsumer(session.createTopic("a.>"))};
        ready();
        String[] names = {"a.b", "a.>"};
        for (int c = 0; c < consumers.length; c++) {
            String on = "on " + names[c] + ": ";
            BytesMessage q0 = bytes(receive(consumers[c], on + "the 3.1.1 QoS 0 publish"));
            expectBytes("mqtt 3.1.1 at 0".getBytes(StandardCharsets.UTF_8), body(q0), on + "QoS 0 payload");
            expectEquals(DeliveryMode.NON_PERSISTENT, q0.getJMSDeliveryMode(), on + "QoS 0 delivery mode");
            expectEquals(0, q0.getIntProperty("ActiveMQ.MQTT.QoS"), on + "ActiveMQ.MQTT.QoS");
            expectEquals(exact, q0.getJMSDestination(), on + "destination");
            BytesMessage q1 = bytes(receive(consumers[c], on + "the 3.1.1 QoS 1 publish"));
            expectBytes(BINARY, body(q1), on + "the binary payload");
            expectEquals(DeliveryMode.PERSISTENT, q1.getJMSDeliveryMode(), on + "QoS 1 delivery mode");
            BytesMessage v5 = bytes(receive(consumers[c], on + "the 5.0 publish with user properties"));
            expectBytes(BINARY, body(v5), on + "the 5.0 binary payload");
            expectEquals("blue", v5.getStringProperty("colour"), on + "user property colour");
            expectEquals(UNICODE, v5.getStringProperty("unicode"), on + "user property unicode");
            expectEquals(DeliveryMode.PERSISTENT, v5.getJMSDeliveryMode(), on + "QoS 1 delivery mode");
            BytesMessage q2 = bytes(receive(consumers[c], on + "the 5.0 QoS 2 publish"));
            expectBytes(TEXT.getBytes(StandardCharsets.UTF_8), body(q2), on + "the UTF-8 payload");
            expectEquals(DeliveryMode.PERSISTENT, q2.getJMSDeliveryMode(), on + "QoS 2 delivery mode");
            expectEquals(2, q2.getIntProperty("ActiveMQ.MQTT.QoS"), on + "ActiveMQ.MQTT.QoS");
            expectEquals(session.createTopic("a.reply"), q2.getJMSReplyTo(), on + "the response topic as JMSReplyTo");
            expectEquals("corr-mqtt", q2.getJMSCorrelationID(), on + "UTF-8 correlation data as JMSCorrelationID");
            long left = q2.getJMSExpiration() - System.currentTimeMillis();
            if (left < 500_000 || left > 600_000) {
                throw new CheckFailed(on + "the expiry interval (600 s) as JMSExpiration: " + left + " ms left");
            }
            expectQuiet(consumers[c], on + "after the four publishes");
        }
    }

    /**
     * jms_to_mqtt: to topic a.b, a persistent TextMessage (string property colour, int property
     * count, JMSCorrelationID, JMSReplyTo topic a.reply, 600 s to live) and a non-persistent
     * BytesMessage (string property kind), which
     * mqtt_cross_checks.py's receive_from_jms expects on a/+.
     */
    void jmsToMqtt() throws Exception {
        Session session = connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer producer = session.createProducer(session.createTopic("a.b"));
        TextMessage text = session.createTextMessage(TEXT);
        text.setStringProperty("colour", "red");
        text.setIntProperty("count", 7);
        text.setJMSCorrelationID("corr-jms");
        text.setJMSReplyTo(session.createTopic("a.reply"));
        producer.send(text, DeliveryMode.PERSISTENT, 4, 600_000);
        BytesMessage bytes = session.createBytesMessage();
        bytes.writeBytes(BINARY);
        bytes.setStringProperty("kind", "binary");
        producer.send(bytes, DeliveryMode.NON_PERSISTENT, 4, 0);
    }

    /** durable_subscribe: the durable subscription jms-away/away of topic away.jms, then away. */
    void durableSubscribe() throws Exception {
        Connection connection = connect(DURABLE_CLIENT_ID);
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        session.createDurableSubscriber(session.createTopic("away.jms"), DURABLE_NAME).close();
    }

    /**
     * durable_resume_and_send: the durable subscription gets the two QoS 1 publishes
     * mqtt_cross_checks.py's publish_while_away made to away/jms, persistent; then, while the
     * MQTT persistent sessions are away, two persistent messages to topic away.mqtt.
     */
    void durableResumeAndSend() throws Exception {
        Connection connection = connect(DURABLE_CLIENT_ID);
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer durable = session.createDurableSubscriber(session.createTopic("away.jms"), DURABLE_NAME);
        for (int index = 1; index <= 2; index++) {
            BytesMessage message = bytes(receive(durable, "MQTT message " + index + " published while away"));
            expectBytes(("mqtt while away " + index).getBytes(StandardCharsets.UTF_8), body(message), "payload");
            expectEquals(DeliveryMode.PERSISTENT, message.getJMSDeliveryMode(), "QoS 1 is persistent");
        }
        expectQuiet(durable, "after the queued messages");
        durable.close();
        session.unsubscribe(DURABLE_NAME);
        MessageProducer producer = session.createProducer(session.createTopic("away.mqtt"));
        for (int index = 1; index <= 2; index++) {
            producer.send(session.createTextMessage("jms while away " + index), DeliveryMode.PERSISTENT, 4, 0);
        }
    }

    /**
     * browser: the JMS side of browser.rs. Consumers of topic browser.out (mqtt.js publishes
     * there) and queue browser.stomp.out (stomp.js sends there), then "ready"; once the caller
     * writes a line on stdin (every client in the page is subscribed), to topic browser.in a
     * TextMessage (string property origin=jms) and a BytesMessage, and to topic
     * browser.stomp.in a TextMessage; then checks what the page sent: mqtt.js 3.1.1's and
     * 5.0's bytes as BytesMessages (5.0 with its user property origin=mqtt.js), stomp.js's text.
     */
    void browser() throws Exception {
        Session session = connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
        Topic out = session.createTopic("browser.out");
        MessageConsumer fromMqtt = session.createConsumer(out);
        MessageConsumer fromStomp = session.createConsumer(session.createQueue("browser.stomp.out"));
        ready();
        String line = new java.io.BufferedReader(new java.io.InputStreamReader(System.in, StandardCharsets.UTF_8))
                .readLine();
        if (line == null) {
            throw new CheckFailed("stdin closed before the page was ready");
        }
        MessageProducer producer = session.createProducer(null);
        TextMessage text = session.createTextMessage(TO_MQTT_TEXT);
        text.setStringProperty("origin", "jms");
        producer.send(session.createTopic("browser.in"), text);
        BytesMessage bytes = session.createBytesMessage();
        bytes.writeBytes(TO_MQTT_BYTES);
        producer.send(session.createTopic("browser.in"), bytes);
        producer.send(session.createTopic("browser.stomp.in"), session.createTextMessage(TO_STOMP_TEXT));
        System.out.println("sent");
        System.out.flush();

        byte[] v4 = withPrefix(MQTT_V4_TEXT);
        byte[] v5 = withPrefix(MQTT_V5_TEXT);
        boolean seenV4 = false;
        boolean seenV5 = false;
        for (int i = 0; i < 2; i++) {
            // The page publishes once it has what this check sent; allow for the page.
            BytesMessage message = bytes(receive(fromMqtt, "mqtt.js's message " + (i + 1), 4 * RECEIVE_MS));
            byte[] body = body(message);
            expectEquals(out, message.getJMSDestination(), "destination");
            if (Arrays.equals(body, v4)) {
                seenV4 = true;
            } else if (Arrays.equals(body, v5)) {
                seenV5 = true;
                expectEquals("mqtt.js", message.getStringProperty("origin"), "mqtt.js 5.0's user property");
            } else {
                throw new CheckFailed("topic browser.out received " + hex(body));
            }
        }
        if (!seenV4 || !seenV5) {
            throw new CheckFailed("expected mqtt.js 3.1.1's and 5.0's messages once each");
        }
        Message fromPage = receive(fromStomp, "stomp.js's message", 4 * RECEIVE_MS);
        String stompText = fromPage instanceof TextMessage t ? t.getText()
                : new String(body(bytes(fromPage)), StandardCharsets.UTF_8);
        expectEquals(STOMP_TEXT, stompText, "stomp.js's body");
        expectEquals(session.createQueue("browser.stomp.out"), fromPage.getJMSDestination(), "destination");
    }

    // ---------------------------------------------------------------------------------------
    // Helpers

    static void ready() {
        System.out.println("ready");
        System.out.flush();
    }

    Connection connect() throws JMSException {
        return connect(null);
    }

    Connection connect(String clientId) throws JMSException {
        Connection connection = new ActiveMQConnectionFactory(url).createConnection();
        connections.add(connection);
        if (clientId != null) {
            connection.setClientID(clientId);
        }
        connection.start();
        return connection;
    }

    void closeAll() {
        for (Connection connection : connections) {
            try {
                connection.close();
            } catch (JMSException ignored) {
                // Closing on the way out: the check's result is decided already.
            }
        }
    }

    static Message receive(MessageConsumer consumer, String what) throws JMSException {
        return receive(consumer, what, RECEIVE_MS);
    }

    static Message receive(MessageConsumer consumer, String what, long timeoutMs) throws JMSException {
        Message message = consumer.receive(timeoutMs);
        if (message == null) {
            throw new CheckFailed("no " + what + " within " + timeoutMs + " ms");
        }
        return message;
    }

    static void expectQuiet(MessageConsumer consumer, String what) throws JMSException {
        Message message = consumer.receive(QUIET_MS);
        if (message != null) {
            throw new CheckFailed(what + ": an unexpected " + message);
        }
    }

    static BytesMessage bytes(Message message) {
        if (message instanceof BytesMessage bytes) {
            return bytes;
        }
        throw new CheckFailed("expected a BytesMessage, got " + message);
    }

    static byte[] body(BytesMessage message) throws JMSException {
        byte[] body = new byte[(int) message.getBodyLength()];
        message.readBytes(body);
        return body;
    }

    static byte[] withPrefix(String text) {
        byte[] utf8 = text.getBytes(StandardCharsets.UTF_8);
        byte[] bytes = Arrays.copyOf(MQTT_PREFIX, MQTT_PREFIX.length + utf8.length);
        System.arraycopy(utf8, 0, bytes, MQTT_PREFIX.length, utf8.length);
        return bytes;
    }

    static String hex(byte[] bytes) {
        StringBuilder out = new StringBuilder();
        for (byte b : bytes) {
            out.append(String.format("%02x", b));
        }
        return out.toString();
    }

    static void expectBytes(byte[] expected, byte[] actual, String what) {
        if (!Arrays.equals(expected, actual)) {
            throw new CheckFailed(what + ": expected " + hex(expected) + ", got " + hex(actual));
        }
    }

    static void expectEquals(Object expected, Object actual, String what) {
        if (expected == null ? actual != null : !expected.equals(actual)) {
            throw new CheckFailed(what + ": expected " + expected + ", got " + actual);
        }
    }
}
