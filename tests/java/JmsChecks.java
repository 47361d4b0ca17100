import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Date;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import javax.jms.BytesMessage;
import javax.jms.Connection;
import javax.jms.DeliveryMode;
import javax.jms.Destination;
import javax.jms.InvalidClientIDException;
import javax.jms.JMSException;
import javax.jms.JMSSecurityException;
import javax.jms.MapMessage;
import javax.jms.Message;
import javax.jms.MessageConsumer;
import javax.jms.MessageEOFException;
import javax.jms.MessageProducer;
import javax.jms.ObjectMessage;
import javax.jms.Queue;
import javax.jms.Session;
import javax.jms.StreamMessage;
import javax.jms.TemporaryQueue;
import javax.jms.TextMessage;
import javax.jms.Topic;
import javax.jms.TopicSubscriber;

import org.apache.activemq.ActiveMQConnection;
import org.apache.activemq.ActiveMQConnectionFactory;
import org.apache.activemq.ActiveMQSession;
import org.apache.activemq.DestinationDoesNotExistException;
import org.apache.activemq.command.ActiveMQMessage;
import org.apache.activemq.transport.TransportListener;

/**
 * Checks of a broker's behaviour as seen through the real ActiveMQ 5.x JMS client (OpenWire).
 *
 * <pre>
 *   java -cp $FERROMQ_JMS_CLASSPATH JmsChecks --url tcp://127.0.0.1:61616 --check queue_send_receive
 *   java -cp $FERROMQ_JMS_CLASSPATH JmsChecks --list
 * </pre>
 *
 * Each check uses destinations of its own (unique per run), prints "ok CHECK" and exits 0 when the
 * broker behaves as Apache ActiveMQ Classic does, or prints "FAIL CHECK: why" and exits 1.
 *
 * The failover check needs the caller to restart the broker in the middle: it prints the line
 * "READY-FOR-RESTART" once the first half is done, then reads one line from stdin, which the
 * caller writes once the broker is back on the same address.
 */
public final class JmsChecks {
    /** How long a message that should arrive may take. */
    static final long RECEIVE_MS = 10_000;
    /** How long to wait to be confident that a message does not arrive. */
    static final long QUIET_MS = 1_000;
    /** The program gives up (with thread dumps) after this long; callers kill it at 180 s. */
    static final long WATCHDOG_MS = 160_000;

    static final String RESTART_MARKER = "READY-FOR-RESTART";

    static final List<String> CHECKS = List.of(
            "queue_send_receive",
            "competing_consumers",
            "topic_fanout",
            "durable_offline",
            "transactions",
            "client_ack_redelivery",
            "acks_beyond_prefetch",
            "all_message_types",
            "request_reply_temp_queue",
            "virtual_topic",
            "wildcard_topic",
            "prefetch_zero",
            "large_message",
            "failover",
            "message_priority",
            "exclusive_consumer",
            "consumer_priority",
            "message_groups",
            "queue_browser",
            "queue_selector",
            "advisories",
            "scheduled_delay",
            "scheduled_repeat",
            "dead_letter_queue",
            "expired_to_dead_letter_queue");

    /**
     * Checks run by the Rust tests together with a STOMP client, so not part of {@link #CHECKS}
     * (which are also run against Apache ActiveMQ alone).
     */
    static final List<String> PAIRED_CHECKS = List.of("stomp_interop", "amqp_interop");

    /**
     * Checks that need the broker configured for them, so not part of {@link #CHECKS} either:
     * configured_composite needs the composites below (jms.rs configures ferromq with them).
     */
    static final List<String> CONFIGURED_CHECKS = List.of("configured_composite", "flow_control",
            "flow_control_fail", "configured_policies", "gc_inactive_destinations",
            "slow_consumer_abort", "temp_store", "login_refused", "authorization_refused",
            "composite_authorization",
            "destination_limit");

    /**
     * configured_policies: queues under policy.strict. dispatch in strict order
     * (strictOrderDispatch); queues under policy.prefetch. give consumers a prefetch of 2
     * (queuePrefetch) in place of the client's default.
     */
    static final String POLICY_STRICT = "policy.strict.";
    static final String POLICY_PREFETCH = "policy.prefetch.";

    /**
     * configured_composite: composite queue ORDERS forwards only, to queue EU, topic AUDIT, and
     * the messages whose int property amount is above 100 to queue BIG; composite topic PRICES
     * keeps its messages and forwards them to queue PRICES_LOG.
     */
    static final String COMPOSITE_ORDERS = "composite.ORDERS";
    static final String COMPOSITE_EU = "composite.EU";
    static final String COMPOSITE_AUDIT = "composite.AUDIT";
    static final String COMPOSITE_BIG = "composite.BIG";
    static final String COMPOSITE_PRICES = "composite.PRICES";
    static final String COMPOSITE_PRICES_LOG = "composite.PRICES.LOG";

    /** Queues of the stomp_interop check: fixed names, since its STOMP half runs outside. */
    static final String FROM_STOMP = "interop.from-stomp";
    static final String TO_STOMP = "interop.to-stomp";
    static final String INTEROP_REPLIES = "interop.replies";
    /** Queues of the amqp_interop check, whose AMQP half is tests/python/amqp_checks.py. */
    static final String FROM_AMQP = "interop.from-amqp";
    static final String TO_AMQP = "interop.to-amqp";

    /** A check's expectation that did not hold. */
    static final class CheckFailed extends RuntimeException {
        private static final long serialVersionUID = 1L;

        CheckFailed(String message) {
            super(message);
        }
    }

    final String url;
    final String check;
    final String unique;
    final List<Connection> connections = new ArrayList<>();

    JmsChecks(String url, String check) {
        this.url = url;
        this.check = check;
        this.unique = Long.toString(System.currentTimeMillis(), 36)
                + Integer.toString(new Random().nextInt(1 << 30), 36);
    }

    public static void main(String[] args) {
        // The client logs through slf4j; keep it to warnings (reconnects, errors), on stderr.
        if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
            System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        }
        String url = null;
        String check = null;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--url" -> url = i + 1 < args.length ? args[++i] : null;
                case "--check" -> check = i + 1 < args.length ? args[++i] : null;
                case "--list" -> {
                    CHECKS.forEach(System.out::println);
                    System.exit(0);
                }
                default -> usage("unknown argument " + args[i]);
            }
        }
        if (url == null || check == null) {
            usage("--url and --check are required");
        }
        if (!CHECKS.contains(check) && !PAIRED_CHECKS.contains(check)
                && !CONFIGURED_CHECKS.contains(check)) {
            usage("unknown check " + check + "; checks: " + String.join(", ", CHECKS));
        }
        startWatchdog(check);
        JmsChecks checks = new JmsChecks(url, check);
        int status;
        try {
            checks.run();
            System.out.println("ok " + check);
            status = 0;
        } catch (CheckFailed failure) {
            System.out.println("FAIL " + check + ": " + failure.getMessage());
            System.err.println("FAIL " + check + ": " + failure.getMessage());
            failure.printStackTrace();
            status = 1;
        } catch (Throwable unexpected) {
            System.out.println("FAIL " + check + ": unexpected " + unexpected);
            System.err.println("FAIL " + check + ": unexpected " + unexpected);
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
        System.err.println("usage: JmsChecks --url BROKER_URL --check CHECK   (or --list)");
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
            System.err.println("FAIL " + check + ": still running after " + WATCHDOG_MS / 1000 + " s; threads:");
            for (Map.Entry<Thread, StackTraceElement[]> entry : Thread.getAllStackTraces().entrySet()) {
                System.err.println("thread " + entry.getKey().getName());
                for (StackTraceElement frame : entry.getValue()) {
                    System.err.println("    at " + frame);
                }
            }
            System.out.flush();
            System.err.flush();
            Runtime.getRuntime().halt(3);
        }, "watchdog");
        watchdog.setDaemon(true);
        watchdog.start();
    }

    void run() throws Exception {
        switch (check) {
            case "queue_send_receive" -> queueSendReceive();
            case "login_refused" -> loginRefused();
            case "authorization_refused" -> authorizationRefused();
            case "composite_authorization" -> compositeAuthorization();
            case "destination_limit" -> destinationLimit();
            case "competing_consumers" -> competingConsumers();
            case "topic_fanout" -> topicFanout();
            case "durable_offline" -> durableOffline();
            case "transactions" -> transactions();
            case "client_ack_redelivery" -> clientAckRedelivery();
            case "acks_beyond_prefetch" -> acksBeyondPrefetch();
            case "all_message_types" -> allMessageTypes();
            case "request_reply_temp_queue" -> requestReplyTempQueue();
            case "virtual_topic" -> virtualTopic();
            case "wildcard_topic" -> wildcardTopic();
            case "prefetch_zero" -> prefetchZero();
            case "large_message" -> largeMessage();
            case "failover" -> failover();
            case "stomp_interop" -> stompInterop();
            case "amqp_interop" -> amqpInterop();
            case "configured_composite" -> configuredComposite();
            case "configured_policies" -> configuredPolicies();
            case "flow_control" -> flowControl();
            case "flow_control_fail" -> flowControlFail();
            case "temp_store" -> tempStore();
            case "gc_inactive_destinations" -> gcInactiveDestinations();
            case "slow_consumer_abort" -> slowConsumerAbort();
            case "message_priority" -> messagePriority();
            case "exclusive_consumer" -> exclusiveConsumer();
            case "consumer_priority" -> consumerPriority();
            case "message_groups" -> messageGroups();
            case "queue_browser" -> queueBrowser();
            case "queue_selector" -> queueSelector();
            case "advisories" -> advisories();
            case "scheduled_delay" -> scheduledDelay();
            case "scheduled_repeat" -> scheduledRepeat();
            case "dead_letter_queue" -> deadLetterQueue();
            case "expired_to_dead_letter_queue" -> expiredToDeadLetterQueue();
            default -> throw new CheckFailed("unknown check " + check);
        }
    }

    // ---------------------------------------------------------------------------------------
    // Checks

    /** Persistent messages on a queue come back in order, with every typed property intact. */
    /**
     * login_refused: the broker checks logins and the URL carries wrong ones (or none, where
     * anonymous access is off): starting the connection fails with JMSSecurityException.
     */
    void loginRefused() throws Exception {
        Connection connection = new ActiveMQConnectionFactory(url).createConnection();
        connections.add(connection);
        try {
            connection.start();
            connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            throw new CheckFailed("the broker let the connection in");
        } catch (JMSSecurityException expected) {
            System.out.println("refused: " + expected.getMessage());
        }
    }

    /**
     * authorization_refused: the URL logs in as a user who may read queue AUTHZ.WRITE.DENIED
     * (which exists) but not write it, may not read OTHER.READ.DENIED, and may read but not
     * create AUTHZ.CREATE.DENIED: the send and the consumers fail with JMSSecurityException,
     * and the connection stays usable.
     */
    void authorizationRefused() throws Exception {
        Connection connection = connect();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        Queue writeDenied = session.createQueue("AUTHZ.WRITE.DENIED");
        try {
            MessageProducer producer = session.createProducer(writeDenied);
            producer.setDeliveryMode(DeliveryMode.PERSISTENT);
            producer.send(session.createTextMessage("forged"));
            throw new CheckFailed("a send without the write right was accepted");
        } catch (JMSSecurityException expected) {
            expectRefusal(expected, "not authorized to write to");
        }
        try {
            session.createConsumer(session.createQueue("OTHER.READ.DENIED"));
            throw new CheckFailed("a consumer without the read right was accepted");
        } catch (JMSSecurityException expected) {
            expectRefusal(expected, "not authorized to read from");
        }
        try {
            session.createConsumer(session.createQueue("AUTHZ.CREATE.DENIED"));
            throw new CheckFailed("a consumer created a queue without the admin right");
        } catch (JMSSecurityException expected) {
            expectRefusal(expected, "not authorized to create");
        }
        // Reading what it may read still works.
        MessageConsumer consumer = session.createConsumer(writeDenied);
        if (consumer.receive(200) != null) {
            throw new CheckFailed("the refused send was delivered");
        }
    }

    /**
     * composite_authorization, as a guest who may use PUBLIC.> queues and topics only: every part
     * of a composite destination is authorized on its own, so a composite naming SECRET.PAYROLL
     * (a queue holding messages) or SECRET.T is refused for reading and writing, and one naming
     * a new queue outside PUBLIC.> does not create it; a composite of PUBLIC parts works.
     */
    void compositeAuthorization() throws Exception {
        Connection connection = connect();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        String[][] refusals = {
            {"queue", "PUBLIC.A,SECRET.PAYROLL", "read from: queue://SECRET.PAYROLL"},
            {"queue", "PUBLIC.A,topic://SECRET.T", "read from: topic://SECRET.T"},
            {"topic", "PUBLIC.X,SECRET.T", "read from: topic://SECRET.T"},
            {"queue", "PUBLIC.A,EVIL.NEW", "not authorized to"},
        };
        for (String[] refusal : refusals) {
            Destination destination = refusal[0].equals("queue")
                    ? session.createQueue(refusal[1]) : session.createTopic(refusal[1]);
            try {
                MessageConsumer consumer = session.createConsumer(destination);
                Message stolen = consumer.receive(500);
                throw new CheckFailed("a consumer of " + refusal[1] + " was accepted"
                        + (stolen == null ? "" : " and received a message"));
            } catch (JMSSecurityException expected) {
                expectRefusal(expected, refusal[2]);
            }
            try {
                MessageProducer producer = session.createProducer(destination);
                producer.setDeliveryMode(DeliveryMode.PERSISTENT);
                producer.send(session.createTextMessage("forged"));
                throw new CheckFailed("a send to " + refusal[1] + " was accepted");
            } catch (JMSSecurityException expected) {
                expectRefusal(expected, refusal[2].replace("read from", "write to"));
            }
        }
        // Every part allowed: the send reaches both queues.
        MessageConsumer first = session.createConsumer(session.createQueue("PUBLIC.A"));
        MessageConsumer second = session.createConsumer(session.createQueue("PUBLIC.B"));
        MessageProducer producer = session.createProducer(session.createQueue("PUBLIC.A,PUBLIC.B"));
        producer.setDeliveryMode(DeliveryMode.PERSISTENT);
        producer.send(session.createTextMessage("public"));
        for (MessageConsumer consumer : new MessageConsumer[] {first, second}) {
            Message message = consumer.receive(10_000);
            if (!(message instanceof TextMessage text) || !"public".equals(text.getText())) {
                throw new CheckFailed("the allowed composite send did not arrive: " + message);
            }
        }
    }

    /**
     * destination_limit (ferromq with a policy `queue = "LIMITED.>"`, `max_destinations = 2`,
     * ActiveMQ's maxDestinations): sends to LIMITED.A and LIMITED.B create them; a send to
     * LIMITED.C and a consumer of LIMITED.D fail with ResourceAllocationException saying the
     * maximum was reached; queues outside the policy and the existing two still work.
     */
    void destinationLimit() throws Exception {
        Connection connection = connect();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer producer = session.createProducer(null);
        producer.setDeliveryMode(DeliveryMode.PERSISTENT);
        producer.send(session.createQueue("LIMITED.A"), session.createTextMessage("a"));
        producer.send(session.createQueue("LIMITED.B"), session.createTextMessage("b"));
        try {
            producer.send(session.createQueue("LIMITED.C"), session.createTextMessage("c"));
            throw new CheckFailed("a send created a third queue under a limit of 2");
        } catch (javax.jms.ResourceAllocationException expected) {
            expectLimit(expected);
        }
        try {
            session.createConsumer(session.createQueue("LIMITED.D"));
            throw new CheckFailed("a consumer created a third queue under a limit of 2");
        } catch (javax.jms.ResourceAllocationException expected) {
            expectLimit(expected);
        }
        producer.send(session.createQueue(name("free")), session.createTextMessage("free"));
        MessageConsumer consumer = session.createConsumer(session.createQueue("LIMITED.A"));
        expectEquals("a", text(receive(consumer, "the message of an existing queue")), "LIMITED.A");
    }

    /** Fails unless `refusal` says the destination limit was reached. */
    static void expectLimit(javax.jms.ResourceAllocationException refusal) throws CheckFailed {
        String message = String.valueOf(refusal.getMessage());
        System.out.println("refused: " + message);
        if (!message.contains("maximum number of destinations allowed (2)")) {
            throw new CheckFailed("refused for another reason than the destination limit: " + message);
        }
    }

    /** Fails unless a security refusal gives the reason `why`. */
    static void expectRefusal(JMSSecurityException refusal, String why) throws CheckFailed {
        String message = String.valueOf(refusal.getMessage());
        System.out.println("refused: " + message);
        if (!message.contains(why)) {
            throw new CheckFailed("refused for another reason than `" + why + "`: " + message);
        }
    }

    void queueSendReceive() throws Exception {
        Connection connection = connect();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        Queue queue = session.createQueue(name("queue"));
        MessageProducer producer = session.createProducer(queue);
        producer.setDeliveryMode(DeliveryMode.PERSISTENT);
        int count = 20;
        List<String> sentIds = new ArrayList<>();
        long before = System.currentTimeMillis();
        for (int i = 0; i < count; i++) {
            TextMessage message = session.createTextMessage("message " + i);
            setTypedProperties(message, i);
            producer.send(message);
            sentIds.add(message.getJMSMessageID());
        }
        long after = System.currentTimeMillis();
        expect(new HashSet<>(sentIds).size() == count && !sentIds.contains(null),
                "the client gave every sent message its own JMSMessageID: " + sentIds);

        MessageConsumer consumer = session.createConsumer(queue);
        for (int i = 0; i < count; i++) {
            Message message = receive(consumer, "message " + i);
            expectEquals("message " + i, text(message), "body of message " + i);
            checkTypedProperties(message, i, "message " + i);
            expectEquals(sentIds.get(i), message.getJMSMessageID(), "JMSMessageID of message " + i);
            expectEquals(queue, message.getJMSDestination(), "JMSDestination of message " + i);
            expectEquals(DeliveryMode.PERSISTENT, message.getJMSDeliveryMode(), "JMSDeliveryMode of message " + i);
            expectEquals(Message.DEFAULT_PRIORITY, message.getJMSPriority(), "JMSPriority of message " + i);
            expectEquals(0L, message.getJMSExpiration(), "JMSExpiration of message " + i);
            expectEquals(false, message.getJMSRedelivered(), "JMSRedelivered of message " + i);
            expect(message.getJMSTimestamp() >= before - 1 && message.getJMSTimestamp() <= after + 1,
                    "JMSTimestamp of message " + i + " is the send time (" + before + ".." + after + "), got "
                            + message.getJMSTimestamp());
            expectEquals(1, message.getIntProperty("JMSXDeliveryCount"), "JMSXDeliveryCount of message " + i);
        }
        expectNothing(consumer, "the queue was drained");
    }

    /** Two consumers on one queue share its messages: each message reaches exactly one of them. */
    void competingConsumers() throws Exception {
        // Prefetch 1, so that the broker has to spread the messages over both consumers.
        String consumerUrl = withOptions(url, "jms.prefetchPolicy.queuePrefetch=1");
        String queueName = name("queue");
        int count = 100;
        List<List<Integer>> received = List.of(
                Collections.synchronizedList(new ArrayList<>()),
                Collections.synchronizedList(new ArrayList<>()));
        List<MessageConsumer> consumers = new ArrayList<>();
        for (int c = 0; c < 2; c++) {
            Connection connection = connect(consumerUrl);
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            consumers.add(session.createConsumer(session.createQueue(queueName)));
        }
        Connection producerConnection = connect();
        Session producerSession = producerConnection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer producer = producerSession.createProducer(producerSession.createQueue(queueName));
        for (int i = 0; i < count; i++) {
            TextMessage message = producerSession.createTextMessage("work " + i);
            message.setIntProperty("index", i);
            producer.send(message);
        }
        AtomicInteger total = new AtomicInteger();
        long deadline = System.currentTimeMillis() + 60_000;
        List<CompletableFuture<Void>> workers = new ArrayList<>();
        for (int c = 0; c < 2; c++) {
            final int which = c;
            workers.add(CompletableFuture.runAsync(() -> {
                try {
                    while (total.get() < count && System.currentTimeMillis() < deadline) {
                        Message message = consumers.get(which).receive(250);
                        if (message != null) {
                            received.get(which).add(message.getIntProperty("index"));
                            total.incrementAndGet();
                            Thread.sleep(5); // some work, so that both consumers take part
                        }
                    }
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            }, daemonExecutor()));
        }
        for (CompletableFuture<Void> worker : workers) {
            worker.get(90, TimeUnit.SECONDS);
        }
        List<Integer> all = new ArrayList<>(received.get(0));
        all.addAll(received.get(1));
        Collections.sort(all);
        expectEquals(range(0, count), all,
                "every message reached exactly one consumer (consumer 1 got " + received.get(0)
                        + ", consumer 2 got " + received.get(1) + ")");
        for (int c = 0; c < 2; c++) {
            List<Integer> mine = received.get(c);
            expect(!mine.isEmpty(), "consumer " + (c + 1) + " got a share of the messages; the other got them all");
            List<Integer> sorted = new ArrayList<>(mine);
            Collections.sort(sorted);
            expectEquals(sorted, mine, "consumer " + (c + 1) + " got its messages in queue order");
        }
        for (MessageConsumer consumer : consumers) {
            expectNothing(consumer, "the queue was drained");
        }
        System.out.println("consumer 1 got " + received.get(0).size() + ", consumer 2 got " + received.get(1).size());
    }

    /** Every subscriber of a topic gets every message, selectors filter, noLocal and late subscribers. */
    void topicFanout() throws Exception {
        String topicName = name("topic");
        List<MessageConsumer> subscribers = new ArrayList<>();
        for (int c = 0; c < 2; c++) {
            Connection connection = connect();
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            subscribers.add(session.createConsumer(session.createTopic(topicName)));
        }
        Connection selectorConnection = connect();
        Session selectorSession = selectorConnection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer evenOnly = selectorSession.createConsumer(selectorSession.createTopic(topicName),
                "parity = 'even' AND index >= 0");

        Connection publisherConnection = connect();
        Session publisherSession = publisherConnection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        Topic topic = publisherSession.createTopic(topicName);
        Session ownSession = publisherConnection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer noLocal = ownSession.createConsumer(topic, null, true);
        MessageConsumer local = ownSession.createConsumer(topic, null, false);
        MessageProducer producer = publisherSession.createProducer(topic);
        int count = 10;
        for (int i = 0; i < count; i++) {
            TextMessage message = publisherSession.createTextMessage("news " + i);
            message.setIntProperty("index", i);
            message.setStringProperty("parity", i % 2 == 0 ? "even" : "odd");
            producer.send(message);
        }
        for (int c = 0; c < subscribers.size(); c++) {
            for (int i = 0; i < count; i++) {
                Message message = receive(subscribers.get(c), "news " + i + " on subscriber " + (c + 1));
                expectEquals("news " + i, text(message), "subscriber " + (c + 1) + " message " + i);
                expectEquals(topic, message.getJMSDestination(), "JMSDestination");
            }
            expectNothing(subscribers.get(c), "subscriber " + (c + 1) + " got all 10 and nothing more");
        }
        for (int i = 0; i < count; i += 2) {
            expectEquals("news " + i, text(receive(evenOnly, "news " + i + " through the selector")),
                    "the selector subscriber gets the even messages only");
        }
        expectNothing(evenOnly, "the selector subscriber gets the even messages only");
        for (int i = 0; i < count; i++) {
            expectEquals("news " + i, text(receive(local, "news " + i + " on the publisher's connection")),
                    "a subscriber on the publishing connection without noLocal");
        }
        expectNothing(noLocal, "a noLocal subscriber on the publishing connection gets nothing");

        Connection lateConnection = connect();
        Session lateSession = lateConnection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer late = lateSession.createConsumer(lateSession.createTopic(topicName));
        expectNothing(late, "a subscriber that joins after the publication gets nothing (not durable)");
    }

    /** A durable subscriber gets what was published while it was offline; client ids are exclusive. */
    void durableOffline() throws Exception {
        String topicName = name("topic");
        String clientId = "jms-durable-" + unique;
        String subscription = "sub";

        Connection subscriberConnection = connect(url, clientId);
        Session subscriberSession = subscriberConnection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        Topic topic = subscriberSession.createTopic(topicName);
        TopicSubscriber subscriber = subscriberSession.createDurableSubscriber(topic, subscription);

        Connection publisherConnection = connect();
        Session publisherSession = publisherConnection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer producer = publisherSession.createProducer(publisherSession.createTopic(topicName));
        producer.setDeliveryMode(DeliveryMode.PERSISTENT);
        producer.send(publisherSession.createTextMessage("online"));
        expectEquals("online", text(receive(subscriber, "the message published while online")), "online message");

        // The client id is taken while the subscriber's connection is open.
        Connection intruder = new ActiveMQConnectionFactory(url).createConnection();
        connections.add(intruder);
        try {
            intruder.setClientID(clientId);
            intruder.start();
            throw new CheckFailed("a second connection with client id " + clientId + " was accepted");
        } catch (InvalidClientIDException expected) {
            // as ActiveMQ: "Broker: ... - Client: ... already connected from ..."
        }
        intruder.close();

        // A subscription in use cannot be removed.
        try {
            subscriberSession.unsubscribe(subscription);
            throw new CheckFailed("unsubscribe succeeded while the durable subscriber was active");
        } catch (CheckFailed e) {
            throw e;
        } catch (JMSException expected) {
            // as ActiveMQ: "Durable consumer is in use for client: ... and subscriptionName: ..."
        }

        subscriber.close();
        subscriberConnection.close();

        int count = 10;
        for (int i = 0; i < count; i++) {
            TextMessage message = publisherSession.createTextMessage("offline " + i);
            setTypedProperties(message, i);
            producer.send(message);
        }

        subscriberConnection = connect(url, clientId);
        subscriberSession = subscriberConnection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        subscriber = subscriberSession.createDurableSubscriber(subscriberSession.createTopic(topicName), subscription);
        for (int i = 0; i < count; i++) {
            Message message = receive(subscriber, "offline " + i + " after reconnecting");
            expectEquals("offline " + i, text(message), "message " + i + " kept for the offline durable subscriber");
            checkTypedProperties(message, i, "offline " + i);
        }
        expectNothing(subscriber, "the durable subscriber got what it missed, once");
        producer.send(publisherSession.createTextMessage("online again"));
        expectEquals("online again", text(receive(subscriber, "a message published after reconnecting")),
                "online again");

        // Unsubscribing removes the subscription and what it holds; the name can be reused afresh.
        subscriber.close();
        subscriberSession.unsubscribe(subscription);
        producer.send(publisherSession.createTextMessage("nobody is subscribed"));
        subscriber = subscriberSession.createDurableSubscriber(subscriberSession.createTopic(topicName), subscription);
        expectNothing(subscriber, "a new subscription does not see what was published before it existed");
        producer.send(publisherSession.createTextMessage("new subscription"));
        expectEquals("new subscription", text(receive(subscriber, "a message for the new subscription")),
                "new subscription");
        subscriber.close();
        subscriberSession.unsubscribe(subscription);
    }

    /** Transacted sessions: rollback discards sends and redelivers receives; commit makes them stick. */
    void transactions() throws Exception {
        String queueName = name("queue");
        String outName = name("out");

        Connection producerConnection = connect();
        Session producerSession = producerConnection.createSession(true, Session.SESSION_TRANSACTED);
        Queue queue = producerSession.createQueue(queueName);
        MessageProducer producer = producerSession.createProducer(queue);
        for (int i = 0; i < 3; i++) {
            producer.send(producerSession.createTextMessage("rolled back " + i));
        }
        producerSession.rollback();
        for (int i = 0; i < 5; i++) {
            producer.send(producerSession.createTextMessage("committed " + i));
        }

        Connection probeConnection = connect();
        Session probeSession = probeConnection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer probe = probeSession.createConsumer(probeSession.createQueue(queueName));
        expectNothing(probe, "uncommitted sends are invisible");
        probe.close();
        producerSession.commit();

        Connection consumerConnection = connect();
        Session consumerSession = consumerConnection.createSession(true, Session.SESSION_TRANSACTED);
        MessageConsumer consumer = consumerSession.createConsumer(consumerSession.createQueue(queueName));
        for (int i = 0; i < 3; i++) {
            Message message = receive(consumer, "committed " + i);
            expectEquals("committed " + i, text(message), "only committed sends arrive, in order");
            expectEquals(false, message.getJMSRedelivered(), "JMSRedelivered on first delivery");
        }
        consumerSession.rollback();
        for (int i = 0; i < 5; i++) {
            Message message = receive(consumer, "committed " + i + " after the rollback");
            expectEquals("committed " + i, text(message), "messages after the rollback, in order");
            boolean redelivered = i < 3;
            expectEquals(redelivered, message.getJMSRedelivered(), "JMSRedelivered of committed " + i);
            expectEquals(redelivered ? 2 : 1, message.getIntProperty("JMSXDeliveryCount"),
                    "JMSXDeliveryCount of committed " + i);
        }
        consumerSession.commit();
        expectNothing(consumer, "rolled back sends never arrive");
        consumer.close();
        consumerConnection.close();

        Connection checkConnection = connect();
        Session checkSession = checkConnection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer check = checkSession.createConsumer(checkSession.createQueue(queueName));
        expectNothing(check, "committed receives are gone from the queue");
        check.close();

        // Receive and send in one transaction: all or nothing.
        producer.send(producerSession.createTextMessage("request"));
        producerSession.commit();
        consumerConnection = connect();
        consumerSession = consumerConnection.createSession(true, Session.SESSION_TRANSACTED);
        consumer = consumerSession.createConsumer(consumerSession.createQueue(queueName));
        MessageProducer forwarder = consumerSession.createProducer(consumerSession.createQueue(outName));
        Message request = receive(consumer, "request");
        forwarder.send(consumerSession.createTextMessage("forwarded " + text(request)));
        consumerSession.rollback();
        MessageConsumer out = checkSession.createConsumer(checkSession.createQueue(outName));
        expectNothing(out, "the rolled back forward");
        request = receive(consumer, "request, redelivered after the rollback");
        expectEquals(true, request.getJMSRedelivered(), "JMSRedelivered after the rollback");
        forwarder.send(consumerSession.createTextMessage("forwarded " + text(request)));
        consumerSession.commit();
        expectEquals("forwarded request", text(receive(out, "the committed forward")), "forward");

        // Closing a session with a transaction open rolls it back.
        producer.send(producerSession.createTextMessage("abandoned 0"));
        producer.send(producerSession.createTextMessage("abandoned 1"));
        producerSession.commit();
        for (int i = 0; i < 2; i++) {
            expectEquals("abandoned " + i, text(receive(consumer, "abandoned " + i)), "abandoned " + i);
        }
        consumerConnection.close();
        check = checkSession.createConsumer(checkSession.createQueue(queueName));
        for (int i = 0; i < 2; i++) {
            Message message = receive(check, "abandoned " + i + " after its transaction was dropped");
            expectEquals("abandoned " + i, text(message), "messages of a dropped transaction come back in order");
            expectEquals(true, message.getJMSRedelivered(), "JMSRedelivered of abandoned " + i);
        }
        expectNothing(check, "the queue was drained");
    }

    /** Client acknowledgement: unacknowledged messages come back after recover() and after a reconnect. */
    /**
     * A client-acknowledge session and a transacted one each consume far more than their
     * prefetch before acknowledging: the client's delivered acks must open the window (as
     * ActiveMQ's prefetch extension does), or the consumers stall at the prefetch.
     */
    void acksBeyondPrefetch() throws Exception {
        int prefetch = 10;
        int total = 5 * prefetch;
        String smallPrefetch = url + (url.contains("?") ? "&" : "?") + "jms.prefetchPolicy.all=" + prefetch;
        for (int mode : new int[] {Session.CLIENT_ACKNOWLEDGE, Session.SESSION_TRANSACTED}) {
            String what = mode == Session.CLIENT_ACKNOWLEDGE ? "client-ack" : "transacted";
            String queueName = name(what);
            Connection producerConnection = connect();
            Session producerSession = producerConnection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageProducer producer = producerSession.createProducer(producerSession.createQueue(queueName));
            for (int i = 0; i < total; i++) {
                producer.send(producerSession.createTextMessage(what + i));
            }
            Connection connection = connect(smallPrefetch);
            Session session = connection.createSession(mode == Session.SESSION_TRANSACTED, mode);
            MessageConsumer consumer = session.createConsumer(session.createQueue(queueName));
            Message last = null;
            for (int i = 0; i < total; i++) {
                last = receive(consumer, what + i + " (prefetch " + prefetch + ", nothing acknowledged yet)");
                expectEquals(what + i, text(last), "delivery in order");
            }
            if (mode == Session.CLIENT_ACKNOWLEDGE) {
                last.acknowledge();
            } else {
                session.commit();
            }
            connection.close();
            Connection again = connect();
            Session check = again.createSession(false, Session.AUTO_ACKNOWLEDGE);
            expectNothing(check.createConsumer(check.createQueue(queueName)), "all " + total
                    + " were acknowledged at once (" + what + ")");
        }
    }

    void clientAckRedelivery() throws Exception {
        String queueName = name("queue");
        Connection producerConnection = connect();
        Session producerSession = producerConnection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer producer = producerSession.createProducer(producerSession.createQueue(queueName));
        producer.setDeliveryMode(DeliveryMode.PERSISTENT);
        for (int i = 0; i < 10; i++) {
            producer.send(producerSession.createTextMessage("m" + i));
        }

        Connection first = connect();
        Session session = first.createSession(false, Session.CLIENT_ACKNOWLEDGE);
        MessageConsumer consumer = session.createConsumer(session.createQueue(queueName));
        Message last = null;
        for (int i = 0; i < 5; i++) {
            last = receive(consumer, "m" + i);
            expectEquals("m" + i, text(last), "first delivery in order");
        }
        last.acknowledge(); // acknowledges m0..m4, everything the session consumed so far
        for (int i = 5; i < 8; i++) {
            Message message = receive(consumer, "m" + i);
            expectEquals("m" + i, text(message), "first delivery in order");
            expectEquals(false, message.getJMSRedelivered(), "JMSRedelivered of m" + i + " on first delivery");
        }
        session.recover();
        for (int i = 5; i < 9; i++) {
            Message message = receive(consumer, "m" + i + " after recover()");
            expectEquals("m" + i, text(message), "recover() restarts after the last acknowledged message");
            expectEquals(i < 8, message.getJMSRedelivered(), "JMSRedelivered of m" + i + " after recover()");
        }
        // m5..m8 consumed, not acknowledged: closing the connection hands them back.
        first.close();

        Connection second = connect();
        session = second.createSession(false, Session.CLIENT_ACKNOWLEDGE);
        consumer = session.createConsumer(session.createQueue(queueName));
        for (int i = 5; i < 10; i++) {
            last = receive(consumer, "m" + i + " after reconnecting");
            expectEquals("m" + i, text(last), "unacknowledged messages come back in order after reconnecting");
            expectEquals(i < 9, last.getJMSRedelivered(), "JMSRedelivered of m" + i + " after reconnecting");
        }
        last.acknowledge();
        expectNothing(consumer, "acknowledged messages do not come back");
        second.close();

        Connection third = connect();
        session = third.createSession(false, Session.CLIENT_ACKNOWLEDGE);
        consumer = session.createConsumer(session.createQueue(queueName));
        expectNothing(consumer, "acknowledged messages are gone for good");
        third.close();

        // ActiveMQ's INDIVIDUAL_ACKNOWLEDGE acknowledges one message, not those before it.
        String individualName = name("individual");
        MessageProducer individualProducer = producerSession.createProducer(producerSession.createQueue(individualName));
        for (int i = 0; i < 4; i++) {
            individualProducer.send(producerSession.createTextMessage("i" + i));
        }
        Connection fourth = connect();
        session = fourth.createSession(false, ActiveMQSession.INDIVIDUAL_ACKNOWLEDGE);
        consumer = session.createConsumer(session.createQueue(individualName));
        for (int i = 0; i < 4; i++) {
            Message message = receive(consumer, "i" + i);
            expectEquals("i" + i, text(message), "individual ack queue order");
            if (i % 2 == 1) {
                message.acknowledge();
            }
        }
        fourth.close();
        Connection fifth = connect();
        session = fifth.createSession(false, Session.AUTO_ACKNOWLEDGE);
        consumer = session.createConsumer(session.createQueue(individualName));
        for (int i = 0; i < 4; i += 2) {
            Message message = receive(consumer, "i" + i + " (not individually acknowledged)");
            expectEquals("i" + i, text(message), "only the unacknowledged messages come back");
            // JMSRedelivered is not checked here: once a consumer has acknowledged individually,
            // ActiveMQ 5.17 hands its unacknowledged messages back with JMSRedelivered=false and
            // JMSXDeliveryCount=1 when it closes (unlike CLIENT_ACKNOWLEDGE, above).
        }
        expectNothing(consumer, "individually acknowledged messages are gone");
    }

    /** Every JMS message type, with non-ASCII text, a 70 KB body and the standard headers. */
    void allMessageTypes() throws Exception {
        // ObjectMessage bodies are only deserialized from packages the client trusts.
        ActiveMQConnectionFactory factory = new ActiveMQConnectionFactory(url);
        factory.setTrustedPackages(List.of("java.util", "java.lang"));
        Connection connection = factory.createConnection();
        connections.add(connection);
        connection.start();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        Queue queue = session.createQueue(name("queue"));
        Topic replyTopic = session.createTopic(name("reply-topic"));
        MessageProducer producer = session.createProducer(queue);

        // The text body takes any Unicode. Strings inside map and stream bodies (and properties)
        // go through the client's own UTF-8 coder (MarshallingSupport), which mangles characters
        // outside the Basic Multilingual Plane on its own, with no broker involved: keep those BMP.
        String bmp = "Grüße, naïve café — 日本語のテキスト — Ελληνικά — עברית — \u00a0\u2028 end";
        String unicode = bmp + " — emoji 🚀🎉";
        byte[] bytes = randomBytes(70 * 1024, 70);
        Map<String, Object> object = new HashMap<>();
        object.put("list", new ArrayList<>(List.of("a", "β", "🚀")));
        object.put("number", 42);
        object.put("date", new Date(1_700_000_000_000L));

        List<Message> sent = new ArrayList<>();
        TextMessage text = session.createTextMessage(unicode);
        sent.add(text);
        TextMessage emptyText = session.createTextMessage();
        sent.add(emptyText);
        BytesMessage bytesMessage = session.createBytesMessage();
        bytesMessage.writeBytes(bytes);
        sent.add(bytesMessage);
        MapMessage map = session.createMapMessage();
        map.setBoolean("boolean", true);
        map.setByte("byte", (byte) -7);
        map.setShort("short", (short) -30000);
        map.setChar("char", 'ß');
        map.setInt("int", Integer.MIN_VALUE);
        map.setLong("long", Long.MAX_VALUE);
        map.setFloat("float", 3.25f);
        map.setDouble("double", -Math.E);
        map.setString("string", bmp);
        map.setBytes("bytes", new byte[] {0, 1, -1, 127, -128});
        map.setJMSReplyTo(replyTopic);
        sent.add(map);
        StreamMessage stream = session.createStreamMessage();
        stream.writeBoolean(false);
        stream.writeByte((byte) 12);
        stream.writeShort((short) 1234);
        stream.writeChar('€');
        stream.writeInt(-123456789);
        stream.writeLong(1L << 62);
        stream.writeFloat(-0.5f);
        stream.writeDouble(1e300);
        stream.writeString(bmp);
        stream.writeBytes(new byte[] {9, 8, 7});
        sent.add(stream);
        ObjectMessage objectMessage = session.createObjectMessage((Serializable) object);
        sent.add(objectMessage);
        Message plain = session.createMessage();
        sent.add(plain);

        String[] kinds = {"text", "empty-text", "bytes", "map", "stream", "object", "plain"};
        for (int i = 0; i < sent.size(); i++) {
            Message message = sent.get(i);
            setTypedProperties(message, i);
            message.setJMSCorrelationID("correlation-" + kinds[i] + "-" + unique);
            message.setJMSType("type-" + kinds[i]);
            if (i == 0) {
                // Highest priority and a time to live.
                producer.send(message, DeliveryMode.PERSISTENT, 9, 600_000);
            } else {
                producer.send(message, i % 2 == 0 ? DeliveryMode.PERSISTENT : DeliveryMode.NON_PERSISTENT,
                        Message.DEFAULT_PRIORITY, 0);
            }
        }

        // ActiveMQ keeps persistent and non-persistent messages in separate cursors, so their
        // relative order is not guaranteed: match the messages up by JMSType.
        MessageConsumer consumer = session.createConsumer(queue);
        Map<String, Message> byType = new HashMap<>();
        for (int i = 0; i < sent.size(); i++) {
            Message message = receive(consumer, (sent.size() - i) + " more messages, types seen: " + byType.keySet());
            Message previous = byType.put(message.getJMSType(), message);
            expect(previous == null, "two messages of JMSType " + message.getJMSType());
        }
        for (int i = 0; i < sent.size(); i++) {
            Message message = byType.get("type-" + kinds[i]);
            expect(message != null, "no message of JMSType type-" + kinds[i] + " among " + byType.keySet());
            checkTypedProperties(message, i, "the " + kinds[i] + " message");
            expectEquals("correlation-" + kinds[i] + "-" + unique, message.getJMSCorrelationID(),
                    "JMSCorrelationID of the " + kinds[i] + " message");
            expectEquals("type-" + kinds[i], message.getJMSType(), "JMSType of the " + kinds[i] + " message");
            expectEquals(sent.get(i).getJMSMessageID(), message.getJMSMessageID(), "JMSMessageID of " + kinds[i]);
            expectEquals(i % 2 == 0 ? DeliveryMode.PERSISTENT : DeliveryMode.NON_PERSISTENT,
                    message.getJMSDeliveryMode(), "JMSDeliveryMode of the " + kinds[i] + " message");
            if (i == 0) {
                expectEquals(9, message.getJMSPriority(), "JMSPriority of the text message");
                long ttl = message.getJMSExpiration() - message.getJMSTimestamp();
                expectEquals(600_000L, ttl, "JMSExpiration - JMSTimestamp of the text message");
            } else {
                expectEquals(Message.DEFAULT_PRIORITY, message.getJMSPriority(), "JMSPriority of " + kinds[i]);
                expectEquals(0L, message.getJMSExpiration(), "JMSExpiration of the " + kinds[i] + " message");
            }
            switch (kinds[i]) {
                case "text" -> expectEquals(unicode, expectType(TextMessage.class, message).getText(), "non-ASCII text");
                case "empty-text" -> expectEquals(null, expectType(TextMessage.class, message).getText(),
                        "a text message without a body");
                case "bytes" -> {
                    BytesMessage received = expectType(BytesMessage.class, message);
                    expectEquals((long) bytes.length, received.getBodyLength(), "bytes message length");
                    byte[] body = new byte[bytes.length];
                    expectEquals(bytes.length, received.readBytes(body), "bytes read");
                    expect(Arrays.equals(bytes, body), "the 70 KB bytes body arrives unchanged");
                    expectEquals(-1, received.readBytes(new byte[1]), "nothing after the body");
                }
                case "map" -> {
                    MapMessage received = expectType(MapMessage.class, message);
                    Set<String> names = new TreeSet<>(Collections.list(castEnumeration(received.getMapNames())));
                    expectEquals(new TreeSet<>(List.of("boolean", "byte", "short", "char", "int", "long", "float",
                            "double", "string", "bytes")), names, "map names");
                    expectTyped(received.getObject("boolean"), Boolean.TRUE, "map boolean");
                    expectTyped(received.getObject("byte"), (byte) -7, "map byte");
                    expectTyped(received.getObject("short"), (short) -30000, "map short");
                    expectTyped(received.getObject("char"), 'ß', "map char");
                    expectTyped(received.getObject("int"), Integer.MIN_VALUE, "map int");
                    expectTyped(received.getObject("long"), Long.MAX_VALUE, "map long");
                    expectTyped(received.getObject("float"), 3.25f, "map float");
                    expectTyped(received.getObject("double"), -Math.E, "map double");
                    expectTyped(received.getObject("string"), bmp, "map string");
                    expect(Arrays.equals(new byte[] {0, 1, -1, 127, -128}, received.getBytes("bytes")),
                            "map bytes: " + Arrays.toString(received.getBytes("bytes")));
                    expectEquals(replyTopic, received.getJMSReplyTo(), "JMSReplyTo (a topic) of the map message");
                }
                case "stream" -> {
                    StreamMessage received = expectType(StreamMessage.class, message);
                    expectTyped(received.readObject(), false, "stream boolean");
                    expectTyped(received.readObject(), (byte) 12, "stream byte");
                    expectTyped(received.readObject(), (short) 1234, "stream short");
                    expectTyped(received.readObject(), '€', "stream char");
                    expectTyped(received.readObject(), -123456789, "stream int");
                    expectTyped(received.readObject(), 1L << 62, "stream long");
                    expectTyped(received.readObject(), -0.5f, "stream float");
                    expectTyped(received.readObject(), 1e300, "stream double");
                    expectTyped(received.readObject(), bmp, "stream string");
                    Object streamBytes = received.readObject();
                    expect(streamBytes instanceof byte[] b && Arrays.equals(b, new byte[] {9, 8, 7}),
                            "stream bytes: " + streamBytes);
                    try {
                        Object extra = received.readObject();
                        throw new CheckFailed("the stream has more than was written: " + extra);
                    } catch (MessageEOFException expected) {
                        // the end
                    }
                }
                case "object" -> {
                    Object received = expectType(ObjectMessage.class, message).getObject();
                    expectEquals(object, received, "the object message's object");
                }
                case "plain" -> expect(message.getClass().getSimpleName().equals("ActiveMQMessage"),
                        "a message without a body arrives as a plain Message, got " + message.getClass().getName());
                default -> throw new IllegalStateException(kinds[i]);
            }
        }
        expectNothing(consumer, "the queue was drained");
    }

    /** Request/reply over a temporary queue between two connections, matched by correlation id. */
    void requestReplyTempQueue() throws Exception {
        String serviceName = name("service");
        List<String> responderErrors = Collections.synchronizedList(new ArrayList<>());
        List<Destination> replyTos = Collections.synchronizedList(new ArrayList<>());

        Connection responderConnection = connect();
        Session responderSession = responderConnection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer replier = responderSession.createProducer(null);
        MessageConsumer service = responderSession.createConsumer(responderSession.createQueue(serviceName));
        service.setMessageListener(request -> {
            try {
                Destination replyTo = request.getJMSReplyTo();
                replyTos.add(replyTo);
                if (replyTo == null) {
                    responderErrors.add("request " + request.getJMSMessageID() + " has no JMSReplyTo");
                    return;
                }
                TextMessage reply = responderSession.createTextMessage("reply to " + text(request));
                reply.setJMSCorrelationID(request.getJMSCorrelationID());
                replier.send(replyTo, reply);
            } catch (Exception e) {
                responderErrors.add("responder: " + e);
            }
        });

        Connection requesterConnection = connect();
        Session requesterSession = requesterConnection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        TemporaryQueue replyQueue = requesterSession.createTemporaryQueue();
        MessageConsumer replies = requesterSession.createConsumer(replyQueue);
        MessageProducer requester = requesterSession.createProducer(requesterSession.createQueue(serviceName));
        int count = 5;
        for (int i = 0; i < count; i++) {
            TextMessage request = requesterSession.createTextMessage("request " + i);
            request.setJMSReplyTo(replyQueue);
            request.setJMSCorrelationID("call-" + i + "-" + unique);
            requester.send(request);
        }
        for (int i = 0; i < count; i++) {
            Message reply = receive(replies, "reply " + i + " (responder errors: " + responderErrors + ")");
            expectEquals("reply to request " + i, text(reply), "reply body");
            expectEquals("call-" + i + "-" + unique, reply.getJMSCorrelationID(), "reply correlation id");
            expectEquals(replyQueue, reply.getJMSDestination(), "the reply's JMSDestination is the temporary queue");
        }
        expect(responderErrors.isEmpty(), "responder errors: " + responderErrors);
        for (Destination replyTo : replyTos) {
            expect(replyTo instanceof TemporaryQueue, "JMSReplyTo arrives as a TemporaryQueue, got " + replyTo);
            expectEquals(replyQueue, replyTo, "the JMSReplyTo the responder saw");
        }
        expectNothing(replies, "one reply per request");

        // A temporary queue lives as long as its connection: once that is closed, persistent
        // (synchronous) sends to it fail. Advisories are off for this sender, so that the error
        // comes from the broker ("The destination temp-queue://... does not exist.") and not from
        // the client's own advisory-fed list of deleted temporary destinations.
        Destination oldReplyTo = replyTos.get(0);
        requesterConnection.close();
        Connection lateConnection = connect(withOptions(url, "jms.watchTopicAdvisories=false"));
        Session lateSession = lateConnection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer lateProducer = lateSession.createProducer(null);
        lateProducer.setDeliveryMode(DeliveryMode.PERSISTENT);
        long deadline = System.currentTimeMillis() + RECEIVE_MS;
        while (true) {
            try {
                lateProducer.send(oldReplyTo, lateSession.createTextMessage("too late"));
            } catch (DestinationDoesNotExistException expected) {
                break;
            }
            if (System.currentTimeMillis() > deadline) {
                throw new CheckFailed("sending to the temporary queue of a closed connection still succeeds after "
                        + RECEIVE_MS / 1000 + " s");
            }
            Thread.sleep(100);
        }
    }

    /** ActiveMQ virtual topics: each Consumer.X.VirtualTopic.T queue gets every message of topic VirtualTopic.T. */
    void virtualTopic() throws Exception {
        String topicName = "VirtualTopic." + name("vt");
        String queueA = "Consumer.A." + topicName;
        String queueB = "Consumer.B." + topicName;

        Connection publisherConnection = connect();
        Session publisherSession = publisherConnection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer producer = publisherSession.createProducer(publisherSession.createTopic(topicName));
        producer.setDeliveryMode(DeliveryMode.PERSISTENT);
        // No consumer queue exists yet: this message goes nowhere.
        producer.send(publisherSession.createTextMessage("before anyone"));

        Connection connectionA = connect();
        Session sessionA = connectionA.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer consumerA = sessionA.createConsumer(sessionA.createQueue(queueA));
        Connection connectionB = connect();
        Session sessionB = connectionB.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer consumerB = sessionB.createConsumer(sessionB.createQueue(queueB));
        Connection connectionT = connect();
        Session sessionT = connectionT.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer subscriber = sessionT.createConsumer(sessionT.createTopic(topicName));

        int count = 10;
        for (int i = 0; i < count; i++) {
            TextMessage message = publisherSession.createTextMessage("event " + i);
            message.setIntProperty("index", i);
            producer.send(message);
        }
        for (int i = 0; i < count; i++) {
            Message a = receive(consumerA, "event " + i + " on " + queueA);
            expectEquals("event " + i, text(a), queueA + " message " + i);
            expectEquals(i, a.getIntProperty("index"), "property on " + queueA);
            expectEquals(sessionA.createQueue(queueA), a.getJMSDestination(), "JMSDestination on " + queueA);
            Message b = receive(consumerB, "event " + i + " on " + queueB);
            expectEquals("event " + i, text(b), queueB + " message " + i);
            Message t = receive(subscriber, "event " + i + " on the plain topic subscriber");
            expectEquals("event " + i, text(t), "topic subscriber message " + i);
            expectEquals(sessionT.createTopic(topicName), t.getJMSDestination(), "JMSDestination on the topic");
        }
        expectNothing(consumerA, queueA + " got each event once");
        expectNothing(consumerB, queueB + " got each event once");
        expectNothing(subscriber, "the topic subscriber got each event once");

        // The consumer queues are queues: they keep messages while their consumers are away.
        consumerA.close();
        for (int i = count; i < count + 5; i++) {
            producer.send(publisherSession.createTextMessage("event " + i));
        }
        for (int i = count; i < count + 5; i++) {
            expectEquals("event " + i, text(receive(consumerB, "event " + i + " on " + queueB)), queueB);
            expectEquals("event " + i, text(receive(subscriber, "event " + i + " on the topic")), "topic");
        }
        consumerA = sessionA.createConsumer(sessionA.createQueue(queueA));
        for (int i = count; i < count + 5; i++) {
            expectEquals("event " + i, text(receive(consumerA, "event " + i + " kept by " + queueA)),
                    queueA + " kept messages while its consumer was away");
        }
        expectNothing(consumerA, queueA + " holds nothing more");

        // Consumers of one consumer queue compete.
        MessageConsumer secondA = connect().createSession(false, Session.AUTO_ACKNOWLEDGE)
                .createConsumer(sessionA.createQueue(queueA));
        for (int i = 0; i < 20; i++) {
            TextMessage message = publisherSession.createTextMessage("shared " + i);
            message.setIntProperty("index", i);
            producer.send(message);
        }
        List<Integer> shared = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 2 * RECEIVE_MS;
        while (shared.size() < 20 && System.currentTimeMillis() < deadline) {
            for (MessageConsumer consumer : List.of(consumerA, secondA)) {
                Message message = consumer.receive(100);
                if (message != null) {
                    shared.add(message.getIntProperty("index"));
                }
            }
        }
        Collections.sort(shared);
        expectEquals(range(0, 20), shared, "two consumers of " + queueA + " share its messages, each once");
        expectNothing(consumerA, queueA + " drained");
        expectNothing(secondA, queueA + " drained");
    }

    /** Topic wildcards: `*` matches one name element, `>` one or more trailing elements. */
    void wildcardTopic() throws Exception {
        String base = name("wild");
        Connection connection = connect();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer star = session.createConsumer(session.createTopic(base + ".A.*.C"));
        MessageConsumer tail = session.createConsumer(session.createTopic(base + ".A.>"));

        Connection publisherConnection = connect();
        Session publisherSession = publisherConnection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer producer = publisherSession.createProducer(null);
        String[] targets = {"A.B.C", "A.B", "A.B.C.D", "A.X.C", "B.B.C", "A", "A.C", "A.B.D"};
        for (String target : targets) {
            TextMessage message = publisherSession.createTextMessage("to " + target);
            producer.send(publisherSession.createTopic(base + "." + target), message);
        }
        Map<MessageConsumer, List<String>> expected = new LinkedHashMap<>();
        expected.put(star, List.of("A.B.C", "A.X.C"));
        expected.put(tail, List.of("A.B.C", "A.B", "A.B.C.D", "A.X.C", "A", "A.C", "A.B.D"));
        Map<MessageConsumer, String> names = Map.of(star, base + ".A.*.C", tail, base + ".A.>");
        for (Map.Entry<MessageConsumer, List<String>> entry : expected.entrySet()) {
            String subscription = names.get(entry.getKey());
            for (String target : entry.getValue()) {
                Message message = receive(entry.getKey(), "the message to " + target + " on " + subscription);
                expectEquals("to " + target, text(message), "messages on " + subscription + " in publication order");
                expectEquals(publisherSession.createTopic(base + "." + target), message.getJMSDestination(),
                        "JMSDestination is the topic published to, not the wildcard");
            }
            expectNothing(entry.getKey(), subscription + " gets nothing else");
        }
    }

    /** Prefetch 0: the broker hands out a message only when receive() asks for it. */
    void prefetchZero() throws Exception {
        String zeroUrl = withOptions(url, "jms.prefetchPolicy.all=0");
        String queueName = name("queue");
        Connection connection = connect(zeroUrl);
        expectEquals(0, ((ActiveMQConnection) connection).getPrefetchPolicy().getQueuePrefetch(),
                "queue prefetch set from the URL");
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer consumer = session.createConsumer(session.createQueue(queueName));
        expectEquals(null, consumer.receiveNoWait(), "receiveNoWait() on an empty queue");
        long start = System.currentTimeMillis();
        expectEquals(null, consumer.receive(1000), "receive(1000) on an empty queue");
        expect(System.currentTimeMillis() - start >= 900, "receive(1000) on an empty queue waited its timeout");

        Connection producerConnection = connect();
        Session producerSession = producerConnection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer producer = producerSession.createProducer(producerSession.createQueue(queueName));
        for (int i = 0; i < 3; i++) {
            producer.send(producerSession.createTextMessage("p" + i));
        }
        expectEquals("p0", text(receive(consumer, "p0")), "receive(timeout)");
        Message second = consumer.receiveNoWait();
        expect(second != null, "receiveNoWait() returns a message that waits on the broker");
        expectEquals("p1", text(second), "receiveNoWait()");
        expectEquals("p2", text(consumer.receiveNoWait()), "receiveNoWait()");
        expectEquals(null, consumer.receiveNoWait(), "receiveNoWait() once the queue is empty");

        // An idle consumer with prefetch 0 holds nothing back from a consumer that asks.
        Session idleSession = connect(zeroUrl).createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer idle = idleSession.createConsumer(idleSession.createQueue(queueName));
        producer.send(producerSession.createTextMessage("p3"));
        expectEquals("p3", text(receive(consumer, "p3 while another consumer idles")), "p3");

        // A receive that is already waiting gets a message sent afterwards.
        CompletableFuture<Message> waiting = CompletableFuture.supplyAsync(() -> {
            try {
                return consumer.receive(RECEIVE_MS);
            } catch (JMSException e) {
                throw new RuntimeException(e);
            }
        }, daemonExecutor());
        Thread.sleep(500);
        producer.send(producerSession.createTextMessage("p4"));
        Message late = waiting.get(2 * RECEIVE_MS, TimeUnit.MILLISECONDS);
        expect(late != null, "a waiting receive(timeout) gets a message sent while it waits");
        expectEquals("p4", text(late), "p4");

        expectEquals(null, consumer.receiveNoWait(), "receiveNoWait() at the end");
        expectEquals(null, idle.receiveNoWait(), "the idle consumer's receiveNoWait() at the end");
    }

    /** A 5 MB persistent message arrives whole, and the queue goes on working after it. */
    void largeMessage() throws Exception {
        Connection connection = connect();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        Queue queue = session.createQueue(name("queue"));
        MessageProducer producer = session.createProducer(queue);
        producer.setDeliveryMode(DeliveryMode.PERSISTENT);
        byte[] payload = randomBytes(5 * 1024 * 1024, 5);
        BytesMessage big = session.createBytesMessage();
        big.writeBytes(payload);
        big.setStringProperty("sha256", sha256(payload));
        producer.send(big);
        producer.send(session.createTextMessage("after the big one"));

        MessageConsumer consumer = session.createConsumer(queue);
        BytesMessage received = expectType(BytesMessage.class, receive(consumer, "the 5 MB message"));
        expectEquals((long) payload.length, received.getBodyLength(), "length of the 5 MB message");
        byte[] body = new byte[payload.length];
        received.readBytes(body);
        expectEquals(sha256(payload), received.getStringProperty("sha256"), "sha256 property");
        expectEquals(sha256(payload), sha256(body), "sha256 of the body received");
        expectEquals(DeliveryMode.PERSISTENT, received.getJMSDeliveryMode(), "JMSDeliveryMode");
        expectEquals("after the big one", text(receive(consumer, "the message after the big one")), "after");
        expectNothing(consumer, "the queue was drained");
    }

    /**
     * A failover: connection rides out a broker restart: no persistent message lost or duplicated.
     * The caller restarts the broker between "READY-FOR-RESTART" and the line it writes to stdin.
     */
    void failover() throws Exception {
        String failoverUrl = "failover:(" + url + ")?initialReconnectDelay=100&maxReconnectDelay=1000"
                + "&timeout=" + 6 * RECEIVE_MS + "&startupMaxReconnectAttempts=5";
        String queueName = name("queue");
        AtomicInteger interruptions = new AtomicInteger();
        CountDownLatch resumed = new CountDownLatch(1);
        ActiveMQConnection connection = (ActiveMQConnection) new ActiveMQConnectionFactory(failoverUrl)
                .createConnection();
        connections.add(connection);
        connection.addTransportListener(new TransportListener() {
            @Override
            public void onCommand(Object command) {
            }

            @Override
            public void onException(java.io.IOException error) {
            }

            @Override
            public void transportInterupted() {
                interruptions.incrementAndGet();
            }

            @Override
            public void transportResumed() {
                if (interruptions.get() > 0) {
                    resumed.countDown();
                }
            }
        });
        connection.start();
        Session producerSession = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer producer = producerSession.createProducer(producerSession.createQueue(queueName));
        producer.setDeliveryMode(DeliveryMode.PERSISTENT);
        Session consumerSession = connection.createSession(true, Session.SESSION_TRANSACTED);
        MessageConsumer consumer = consumerSession.createConsumer(consumerSession.createQueue(queueName));

        int total = 100;
        int half = total / 2;
        int consumedBefore = 20;
        for (int i = 0; i < half; i++) {
            producer.send(indexed(producerSession, "f", i));
        }
        List<Integer> received = new ArrayList<>();
        for (int i = 0; i < consumedBefore; i++) {
            received.add(receive(consumer, "f" + i + " before the restart").getIntProperty("index"));
        }
        consumerSession.commit();
        expectEquals(range(0, consumedBefore), received, "messages before the restart, in order");

        System.out.println(RESTART_MARKER);
        System.out.flush();
        String line = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
        if (line == null) {
            throw new CheckFailed("stdin closed before the caller said the broker was restarted");
        }
        if (!resumed.await(6 * RECEIVE_MS, TimeUnit.MILLISECONDS)) {
            throw new CheckFailed(interruptions.get() == 0
                    ? "the connection was never interrupted: was the broker restarted?"
                    : "the failover transport did not reconnect within " + 6 * RECEIVE_MS / 1000 + " s");
        }

        for (int i = half; i < total; i++) {
            producer.send(indexed(producerSession, "f", i));
        }
        List<Integer> after = new ArrayList<>();
        while (received.size() + after.size() < total) {
            Message message = consumer.receive(RECEIVE_MS);
            if (message == null) {
                break;
            }
            after.add(message.getIntProperty("index"));
        }
        consumerSession.commit();
        Message extra = consumer.receive(2 * QUIET_MS);
        if (extra != null) {
            after.add(extra.getIntProperty("index"));
            consumerSession.commit();
        }
        List<Integer> all = new ArrayList<>(received);
        all.addAll(after);
        List<Integer> sorted = new ArrayList<>(all);
        Collections.sort(sorted);
        Set<Integer> distinct = new TreeSet<>(all);
        List<Integer> missing = new ArrayList<>(range(0, total));
        missing.removeAll(distinct);
        List<Integer> duplicated = new ArrayList<>(all);
        for (Integer index : distinct) {
            duplicated.remove(index);
        }
        expect(missing.isEmpty(), "persistent messages lost across the restart: " + missing);
        expect(duplicated.isEmpty(), "messages delivered twice across the restart: " + duplicated);
        expectEquals(range(consumedBefore, total), after, "messages after the restart, in order");
        System.out.println("interruptions: " + interruptions.get());
    }

    /**
     * Cross-protocol delivery with a STOMP client (the Rust side): what it sent to
     * interop.from-stomp arrives with its headers mapped to JMS ones and its other headers as
     * string properties; what this sends to interop.to-stomp goes the other way.
     */
    void configuredComposite() throws Exception {
        Connection connection = connect();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        Queue orders = session.createQueue(COMPOSITE_ORDERS);
        Queue eu = session.createQueue(COMPOSITE_EU);
        Topic audit = session.createTopic(COMPOSITE_AUDIT);
        Queue big = session.createQueue(COMPOSITE_BIG);
        MessageConsumer euConsumer = session.createConsumer(eu);
        MessageConsumer auditSubscriber = session.createConsumer(audit);
        MessageConsumer bigConsumer = session.createConsumer(big);
        MessageConsumer ordersConsumer = session.createConsumer(orders);

        MessageProducer producer = session.createProducer(orders);
        int[] amounts = {50, 150, 99, 1000};
        for (int i = 0; i < amounts.length; i++) {
            TextMessage message = session.createTextMessage("order " + i);
            message.setIntProperty("amount", amounts[i]);
            producer.send(message);
        }
        for (int i = 0; i < amounts.length; i++) {
            Message fromEu = receive(euConsumer, "order " + i + " on " + COMPOSITE_EU);
            expectEquals("order " + i, text(fromEu), COMPOSITE_EU + " message " + i);
            expectEquals(amounts[i], fromEu.getIntProperty("amount"), "property on " + COMPOSITE_EU);
            expectEquals(eu, fromEu.getJMSDestination(), "JMSDestination of a forwarded copy");
            expectEquals(orders, originalDestination(fromEu), "original destination of a forwarded copy");
            Message fromAudit = receive(auditSubscriber, "order " + i + " on topic " + COMPOSITE_AUDIT);
            expectEquals("order " + i, text(fromAudit), COMPOSITE_AUDIT + " message " + i);
            expectEquals(audit, fromAudit.getJMSDestination(), "JMSDestination of a copy on a topic");
            expectEquals(orders, originalDestination(fromAudit), "original destination on the topic");
        }
        for (int i : new int[] {1, 3}) {
            Message fromBig = receive(bigConsumer, "order " + i + " on " + COMPOSITE_BIG);
            expectEquals("order " + i, text(fromBig), COMPOSITE_BIG + " gets amounts above 100 only");
            expectEquals(big, fromBig.getJMSDestination(), "JMSDestination on " + COMPOSITE_BIG);
        }
        expectNothing(bigConsumer, COMPOSITE_BIG + " gets only what its selector matches");
        expectNothing(ordersConsumer, COMPOSITE_ORDERS + " forwards only");
        expectNothing(euConsumer, COMPOSITE_EU + " got each order once");
        expectNothing(auditSubscriber, COMPOSITE_AUDIT + " got each order once");

        Topic prices = session.createTopic(COMPOSITE_PRICES);
        Queue pricesLog = session.createQueue(COMPOSITE_PRICES_LOG);
        MessageConsumer pricesSubscriber = session.createConsumer(prices);
        MessageConsumer logConsumer = session.createConsumer(pricesLog);
        session.createProducer(prices).send(session.createTextMessage("42"));
        Message price = receive(pricesSubscriber, "the price on " + COMPOSITE_PRICES);
        expectEquals("42", text(price), "the composite topic keeps its messages");
        expectEquals(prices, price.getJMSDestination(), "JMSDestination on the composite topic");
        expectEquals(null, originalDestination(price), "no original destination on the composite itself");
        Message logged = receive(logConsumer, "the price on " + COMPOSITE_PRICES_LOG);
        expectEquals("42", text(logged), COMPOSITE_PRICES_LOG);
        expectEquals(pricesLog, logged.getJMSDestination(), "JMSDestination on " + COMPOSITE_PRICES_LOG);
        expectEquals(prices, originalDestination(logged), "original destination on " + COMPOSITE_PRICES_LOG);
    }

    /** ActiveMQ's originalDestination of a message, which JMS has no getter for. */
    static Destination originalDestination(Message message) {
        return ((ActiveMQMessage) message).getOriginalDestination();
    }

    void stompInterop() throws Exception {
        Connection connection = connect();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer fromStomp = session.createConsumer(session.createQueue(FROM_STOMP));

        TextMessage text = expectType(TextMessage.class, receive(fromStomp, "the STOMP text message"));
        expectEquals("h\u00e9llo from stomp \u2713", text.getText(), "the text, as STOMP sent it");
        expectEquals(DeliveryMode.PERSISTENT, text.getJMSDeliveryMode(), "persistent:true");
        expectEquals(7, text.getJMSPriority(), "priority:7");
        expectEquals("corr-1", text.getJMSCorrelationID(), "correlation-id");
        expectEquals("order", text.getJMSType(), "type");
        expectEquals(INTEROP_REPLIES, ((Queue) text.getJMSReplyTo()).getQueueName(), "reply-to");
        expectEquals(FROM_STOMP, ((Queue) text.getJMSDestination()).getQueueName(), "destination");
        expect(text.getJMSExpiration() > System.currentTimeMillis(), "expires is in the future: "
                + text.getJMSExpiration());
        expectEquals("red", text.getStringProperty("color"), "a custom header as a property");
        expectEquals("42", text.getStringProperty("count"), "STOMP properties are strings");
        expect(text.getJMSMessageID() != null && text.getJMSMessageID().startsWith("ID:"),
                "a JMSMessageID in ActiveMQ's form: " + text.getJMSMessageID());

        BytesMessage bytes = expectType(BytesMessage.class, receive(fromStomp, "the STOMP bytes message"));
        byte[] body = new byte[(int) bytes.getBodyLength()];
        bytes.readBytes(body);
        byte[] expected = new byte[256];
        for (int i = 0; i < expected.length; i++) {
            expected[i] = (byte) i;
        }
        expect(Arrays.equals(expected, body), "the bytes with NULs, as STOMP sent them: "
                + Arrays.toString(body));
        expectEquals(DeliveryMode.NON_PERSISTENT, bytes.getJMSDeliveryMode(), "STOMP's default");

        MessageProducer producer = session.createProducer(session.createQueue(TO_STOMP));
        TextMessage reply = session.createTextMessage("\u00fcn\u00efcode reply");
        reply.setJMSCorrelationID("corr-2");
        reply.setJMSType("reply");
        reply.setJMSReplyTo(session.createQueue(INTEROP_REPLIES));
        reply.setStringProperty("s", "x");
        reply.setIntProperty("i", 7);
        reply.setLongProperty("l", 1L << 40);
        reply.setBooleanProperty("b", true);
        reply.setDoubleProperty("d", 2.5);
        producer.send(reply, DeliveryMode.PERSISTENT, 8, 600_000);
        BytesMessage binary = session.createBytesMessage();
        binary.writeBytes(expected);
        producer.send(binary, DeliveryMode.NON_PERSISTENT, 4, 0);
    }

    /**
     * Cross-protocol with an AMQP 1.0 client (Qpid Proton, run by jms.rs before and after this
     * check): what it sent arrives with its headers, typed properties and every body kind, and
     * what this check sends back is checked on the AMQP side.
     */
    void amqpInterop() throws Exception {
        Connection connection = connect();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer fromAmqp = session.createConsumer(session.createQueue(FROM_AMQP));

        TextMessage text = expectType(TextMessage.class, receive(fromAmqp, "the AMQP text message"));
        expectEquals("h\u00e9llo from amqp \u2713", text.getText(), "the text, as AMQP sent it");
        expectEquals("ID:amqp-interop-1", text.getJMSMessageID(), "message-id is the JMSMessageID");
        expectEquals(DeliveryMode.PERSISTENT, text.getJMSDeliveryMode(), "header durable");
        expectEquals(7, text.getJMSPriority(), "header priority");
        expectEquals("corr-a", text.getJMSCorrelationID(), "correlation-id");
        expectEquals("order", text.getJMSType(), "subject is the JMSType");
        expectEquals(INTEROP_REPLIES, ((Queue) text.getJMSReplyTo()).getQueueName(), "reply-to");
        expectEquals(FROM_AMQP, ((Queue) text.getJMSDestination()).getQueueName(), "destination");
        long now = System.currentTimeMillis();
        expect(text.getJMSExpiration() > now && text.getJMSExpiration() <= now + 600_000,
                "ttl 600 s is the JMSExpiration: " + text.getJMSExpiration() + " at " + now);
        expectTypedProperties(text, "the AMQP application properties");

        BytesMessage bytes = expectType(BytesMessage.class, receive(fromAmqp, "the AMQP data section"));
        byte[] body = new byte[(int) bytes.getBodyLength()];
        bytes.readBytes(body);
        byte[] expected = new byte[256];
        for (int i = 0; i < expected.length; i++) {
            expected[i] = (byte) i;
        }
        expect(Arrays.equals(expected, body), "the data section's bytes: " + Arrays.toString(body));
        expectEquals(DeliveryMode.NON_PERSISTENT, bytes.getJMSDeliveryMode(), "durable=false");

        MapMessage map = expectType(MapMessage.class, receive(fromAmqp, "the AMQP map"));
        expectEquals("text", map.getString("s"), "map entry s");
        expectEquals(Integer.valueOf(7), map.getObject("i"), "map entry i, an int");
        expectEquals(Long.valueOf(1L << 40), map.getObject("l"), "map entry l, a long");
        expectEquals(Boolean.TRUE, map.getObject("b"), "map entry b");
        expectEquals(Double.valueOf(2.5), map.getObject("d"), "map entry d");
        expect(Arrays.equals(new byte[] {0, 1}, map.getBytes("bin")), "map entry bin, binary");

        for (String form : List.of("an amqp-value list", "an amqp-sequence")) {
            StreamMessage stream = expectType(StreamMessage.class, receive(fromAmqp, "the stream as " + form));
            expectEquals(Integer.valueOf(1), stream.readObject(), "stream value 1 of " + form);
            expectEquals("two", stream.readObject(), "stream value 2 of " + form);
            expectEquals(Double.valueOf(2.5), stream.readObject(), "stream value 3 of " + form);
            expectEquals(Boolean.TRUE, stream.readObject(), "stream value 4 of " + form);
            try {
                Object extra = stream.readObject();
                throw new CheckFailed("the stream as " + form + " has a fifth value: " + extra);
            } catch (MessageEOFException end) {
                // four values, as sent
            }
        }

        ObjectMessage object = expectType(ObjectMessage.class, receive(fromAmqp, "the serialized object"));
        expectEquals("hello", object.getObject(), "the serialized java.lang.String");
        expectNothing(fromAmqp, "everything the AMQP client sent arrived once");

        MessageProducer producer = session.createProducer(session.createQueue(TO_AMQP));
        TextMessage reply = session.createTextMessage("\u00fcn\u00efcode reply");
        reply.setJMSCorrelationID("corr-2");
        reply.setJMSType("reply");
        reply.setJMSReplyTo(session.createQueue(INTEROP_REPLIES));
        setInteropProperties(reply);
        producer.send(reply, DeliveryMode.PERSISTENT, 8, 600_000);
        BytesMessage binary = session.createBytesMessage();
        binary.writeBytes(expected);
        producer.send(binary, DeliveryMode.NON_PERSISTENT, 4, 0);
        MapMessage outMap = session.createMapMessage();
        outMap.setString("s", "text");
        outMap.setInt("i", 7);
        outMap.setLong("l", 1L << 40);
        outMap.setBoolean("b", true);
        outMap.setDouble("d", 2.5);
        outMap.setBytes("bin", new byte[] {0, 1});
        producer.send(outMap);
        StreamMessage outStream = session.createStreamMessage();
        outStream.writeInt(1);
        outStream.writeString("two");
        outStream.writeDouble(2.5);
        outStream.writeBoolean(true);
        producer.send(outStream);
        producer.send(session.createObjectMessage("hello back"));
    }

    /** The typed properties both halves of amqp_interop send. */
    static void setInteropProperties(Message message) throws JMSException {
        message.setStringProperty("s", "x");
        message.setIntProperty("i", 7);
        message.setLongProperty("l", 1L << 40);
        message.setBooleanProperty("b", true);
        message.setDoubleProperty("d", 2.5);
        message.setFloatProperty("f", 1.5f);
        message.setShortProperty("sh", (short) 3);
        message.setByteProperty("by", (byte) -2);
    }

    static void expectTypedProperties(Message message, String what) throws JMSException {
        expectEquals("x", message.getObjectProperty("s"), what + ": s");
        expectEquals(Integer.valueOf(7), message.getObjectProperty("i"), what + ": i, an int");
        expectEquals(Long.valueOf(1L << 40), message.getObjectProperty("l"), what + ": l, a long");
        expectEquals(Boolean.TRUE, message.getObjectProperty("b"), what + ": b");
        expectEquals(Double.valueOf(2.5), message.getObjectProperty("d"), what + ": d, a double");
        expectEquals(Float.valueOf(1.5f), message.getObjectProperty("f"), what + ": f, a float");
        expectEquals(Short.valueOf((short) 3), message.getObjectProperty("sh"), what + ": sh, a short");
        expectEquals(Byte.valueOf((byte) -2), message.getObjectProperty("by"), what + ": by, a byte");
    }

    /** Messages sent with priorities 0-9 while no consumer is attached come out highest first. */
    void messagePriority() throws Exception {
        String queueName = name("queue");
        Connection connection = connect();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer producer = session.createProducer(session.createQueue(queueName));
        int[] priorities = {4, 0, 9, 5, 1, 9, 7, 4, 0, 3};
        for (int i = 0; i < priorities.length; i++) {
            producer.send(indexed(session, "p", i), DeliveryMode.PERSISTENT, priorities[i], 0);
        }
        MessageConsumer consumer = session.createConsumer(session.createQueue(queueName));
        List<Integer> order = new ArrayList<>();
        for (int i = 0; i < priorities.length; i++) {
            Message message = receive(consumer, "message " + i + " by priority");
            expectEquals(priorities[message.getIntProperty("index")], message.getJMSPriority(), "JMSPriority kept");
            order.add(message.getIntProperty("index"));
        }
        // Highest priority first, in send order within a priority.
        expectEquals(List.of(2, 5, 6, 3, 0, 7, 9, 4, 1, 8), order, "delivery order by priority");
    }

    /** An exclusive consumer gets everything; when it closes, another takes over. */
    /** Destination policies: strict-order dispatch and a policy prefetch (see POLICY_*). */
    void configuredPolicies() throws Exception {
        Connection connection = connect();
        // Strict order: the first consumer's prefetch (the client's 1000) fills before the
        // second consumer gets anything; round-robin would split the messages between them.
        String strict = POLICY_STRICT + unique;
        Session first = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        Session second = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer firstConsumer = first.createConsumer(first.createQueue(strict));
        MessageConsumer secondConsumer = second.createConsumer(second.createQueue(strict));
        Session producing = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer producer = producing.createProducer(producing.createQueue(strict));
        for (int i = 0; i < 6; i++) {
            producer.send(indexed(producing, "s", i));
        }
        for (int i = 0; i < 6; i++) {
            expectEquals(i, receive(firstConsumer, "s" + i + " on the first consumer").getIntProperty("index"),
                    "strict order: the first consumer gets every message");
        }
        expectNothing(secondConsumer, "strict order fills the first consumer first");
        firstConsumer.close();
        secondConsumer.close();

        // The policy's prefetch of 2: a consumer that acknowledges nothing holds two messages,
        // and a second consumer gets the rest.
        String prefetch = POLICY_PREFETCH + unique;
        Session holding = connection.createSession(false, Session.CLIENT_ACKNOWLEDGE);
        MessageConsumer holder = holding.createConsumer(holding.createQueue(prefetch));
        MessageProducer prefetchProducer = producing.createProducer(producing.createQueue(prefetch));
        for (int i = 0; i < 5; i++) {
            prefetchProducer.send(indexed(producing, "p", i));
        }
        expectEquals(0, receive(holder, "p0 on the holder").getIntProperty("index"), "the first message");
        Session other = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer taker = other.createConsumer(other.createQueue(prefetch));
        for (int i = 2; i < 5; i++) {
            expectEquals(i, receive(taker, "p" + i + " on the second consumer").getIntProperty("index"),
                    "the holder's prefetch of 2 leaves the rest to the second consumer");
        }
        connection.close();
    }

    void exclusiveConsumer() throws Exception {
        String queueName = name("queue");
        Connection connection = connect();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer exclusive = session.createConsumer(session.createQueue(queueName + "?consumer.exclusive=true"));
        MessageConsumer other = session.createConsumer(session.createQueue(queueName));
        MessageProducer producer = session.createProducer(session.createQueue(queueName));
        for (int i = 0; i < 10; i++) {
            producer.send(indexed(session, "x", i));
        }
        for (int i = 0; i < 10; i++) {
            expectEquals(i, receive(exclusive, "x" + i + " on the exclusive consumer").getIntProperty("index"),
                    "the exclusive consumer gets every message in order");
        }
        expectNothing(other, "the exclusive consumer has the queue");
        exclusive.close();
        producer.send(indexed(session, "x", 10));
        expectEquals(10, receive(other, "x10 after the exclusive consumer closed").getIntProperty("index"),
                "another consumer takes over");
    }

    /** Messages go to the highest-priority consumer while it has room in its prefetch. */
    void consumerPriority() throws Exception {
        String queueName = name("queue");
        Connection connection = connect(url + (url.contains("?") ? "&" : "?") + "jms.prefetchPolicy.all=5");
        Session session = connection.createSession(false, Session.CLIENT_ACKNOWLEDGE);
        MessageConsumer low = session.createConsumer(session.createQueue(queueName + "?consumer.priority=1"));
        MessageConsumer high = session.createConsumer(session.createQueue(queueName + "?consumer.priority=9"));
        Session producerSession = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer producer = producerSession.createProducer(producerSession.createQueue(queueName));
        for (int i = 0; i < 8; i++) {
            producer.send(indexed(producerSession, "c", i));
        }
        // The high-priority consumer's prefetch (5) fills first; the rest overflow to the low one.
        List<Integer> toHigh = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
            toHigh.add(receive(high, "message " + i + " on the high-priority consumer").getIntProperty("index"));
        }
        expectEquals(range(0, 5), toHigh, "the high-priority consumer gets the first prefetch-full");
        List<Integer> toLow = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            toLow.add(receive(low, "message " + (5 + i) + " on the low-priority consumer").getIntProperty("index"));
        }
        expectEquals(range(5, 8), toLow, "the low-priority consumer gets the overflow");
    }

    /** A group sticks to one consumer and moves to another when that consumer closes. */
    void messageGroups() throws Exception {
        String queueName = name("queue");
        Connection connection = connect(url + (url.contains("?") ? "&" : "?") + "jms.prefetchPolicy.all=1");
        Session first = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        Session second = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer a = first.createConsumer(first.createQueue(queueName));
        MessageConsumer b = second.createConsumer(second.createQueue(queueName));
        Session producerSession = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer producer = producerSession.createProducer(producerSession.createQueue(queueName));
        int perGroup = 6;
        // All of red first: without groups, the consumers would share it.
        for (String group : new String[] {"red", "blue"}) {
            for (int i = 0; i < perGroup; i++) {
                Message message = indexed(producerSession, group, i);
                message.setStringProperty("JMSXGroupID", group);
                message.setIntProperty("JMSXGroupSeq", i + 1);
                message.setStringProperty("group", group);
                producer.send(message);
            }
        }
        Map<String, Set<String>> consumersOfGroup = new HashMap<>();
        Map<String, List<Integer>> orderOfGroup = new HashMap<>();
        for (int i = 0; i < 2 * perGroup; i++) {
            // Alternate between the consumers so that neither sits on its single prefetched message.
            for (MessageConsumer consumer : List.of(a, b)) {
                Message message = consumer.receive(200);
                if (message == null) {
                    continue;
                }
                String group = message.getStringProperty("group");
                expectEquals(group, message.getStringProperty("JMSXGroupID"), "JMSXGroupID kept");
                consumersOfGroup.computeIfAbsent(group, g -> new HashSet<>()).add(consumer == a ? "a" : "b");
                orderOfGroup.computeIfAbsent(group, g -> new ArrayList<>()).add(message.getIntProperty("index"));
            }
        }
        for (String group : new String[] {"red", "blue"}) {
            expectEquals(range(0, perGroup), orderOfGroup.get(group), "group " + group + " in order");
            expectEquals(1, consumersOfGroup.get(group).size(), "group " + group + " sticks to one consumer: "
                    + consumersOfGroup.get(group));
        }
        // Close the owner of "red": the group moves to the other consumer.
        boolean redOnA = consumersOfGroup.get("red").contains("a");
        (redOnA ? a : b).close();
        MessageConsumer survivor = redOnA ? b : a;
        Message message = indexed(producerSession, "red", perGroup);
        message.setStringProperty("JMSXGroupID", "red");
        message.setStringProperty("group", "red");
        producer.send(message);
        expectEquals("red", receive(survivor, "red after its consumer closed").getStringProperty("group"),
                "the group moves to the remaining consumer");
    }

    /**
     * Queue consumers with selectors on properties and headers get only what matches; what
     * no one matches waits for a later consumer; an invalid selector is refused.
     */
    void queueSelector() throws Exception {
        String queueName = name("queue");
        Connection connection = connect();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        javax.jms.Queue queue = session.createQueue(queueName);
        MessageConsumer red = session.createConsumer(queue, "color = 'red' AND weight BETWEEN 1 AND 5");
        MessageConsumer urgent = session.createConsumer(queue, "JMSPriority > 6 OR JMSType LIKE 'urgent%'");
        MessageProducer producer = session.createProducer(queue);
        String[] colors = {"red", "blue", "red", "green", "red", "blue"};
        for (int i = 0; i < colors.length; i++) {
            Message message = indexed(session, "s", i);
            message.setStringProperty("color", colors[i]);
            message.setIntProperty("weight", i + 1);
            if (i == 1) {
                message.setJMSType("urgent-order");
            }
            producer.send(message, DeliveryMode.PERSISTENT, i == 3 ? 9 : 4, 0);
        }
        List<Integer> toRed = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            toRed.add(receive(red, "red message " + i).getIntProperty("index"));
        }
        expectEquals(List.of(0, 2, 4), toRed, "red weights 1-5");
        expectNothing(red, "the red consumer matches nothing else");
        List<Integer> toUrgent = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            toUrgent.add(receive(urgent, "urgent message " + i).getIntProperty("index"));
        }
        toUrgent.sort(null);
        expectEquals(List.of(1, 3), toUrgent, "JMSType LIKE and JMSPriority");
        MessageConsumer rest = session.createConsumer(queue);
        expectEquals(5, receive(rest, "the message no selector matched").getIntProperty("index"),
                "unmatched messages wait for another consumer");
        try {
            session.createConsumer(queue, "color = 'red' AND");
            throw new CheckFailed("an invalid selector was accepted");
        } catch (javax.jms.InvalidSelectorException expected) {
            // The client or the broker refuses it.
        }
    }

    /**
     * Advisories as the client's AdvisorySupport reads them: a consumer's start (ConsumerInfo,
     * consumerCount 1) and stop (RemoveInfo with the same consumer id, consumerCount 0) on
     * ActiveMQ.Advisory.Consumer.Queue.NAME, and a connection's start and stop on
     * ActiveMQ.Advisory.Connection.
     */
    void advisories() throws Exception {
        Connection monitor = connect();
        Session session = monitor.createSession(false, Session.AUTO_ACKNOWLEDGE);
        org.apache.activemq.command.ActiveMQQueue queue =
                new org.apache.activemq.command.ActiveMQQueue(name("queue"));
        MessageConsumer consumerEvents =
                session.createConsumer(org.apache.activemq.advisory.AdvisorySupport.getConsumerAdvisoryTopic(queue));
        MessageConsumer connectionEvents =
                session.createConsumer(org.apache.activemq.advisory.AdvisorySupport.getConnectionAdvisoryTopic());
        MessageConsumer producerEvents =
                session.createConsumer(org.apache.activemq.advisory.AdvisorySupport.getProducerAdvisoryTopic(queue));

        Connection other = connect();
        // ActiveMQ first replays the connections that exist (the monitor's own); skip those.
        org.apache.activemq.command.ConnectionId own =
                ((ActiveMQConnection) monitor).getConnectionInfo().getConnectionId();
        Object opened;
        do {
            opened = dataStructure(receive(connectionEvents, "the connection advisory of a new connection"));
            expect(opened instanceof org.apache.activemq.command.ConnectionInfo,
                    "a connection start carries a ConnectionInfo, got " + opened);
        } while (own.equals(((org.apache.activemq.command.ConnectionInfo) opened).getConnectionId()));
        Session otherSession = other.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer consumer = otherSession.createConsumer(queue);
        Message started = receive(consumerEvents, "the advisory of the consumer's start");
        Object info = dataStructure(started);
        expect(info instanceof org.apache.activemq.command.ConsumerInfo,
                "a consumer start carries a ConsumerInfo, got " + info);
        org.apache.activemq.command.ConsumerInfo consumerInfo = (org.apache.activemq.command.ConsumerInfo) info;
        expectEquals(queue, consumerInfo.getDestination(), "the advisory names the consumer's queue");
        expectEquals(1, started.getIntProperty("consumerCount"), "consumerCount after the start");

        consumer.close();
        Message stopped = receive(consumerEvents, "the advisory of the consumer's stop");
        Object removal = dataStructure(stopped);
        expect(removal instanceof org.apache.activemq.command.RemoveInfo,
                "a consumer stop carries a RemoveInfo, got " + removal);
        expectEquals(consumerInfo.getConsumerId(),
                ((org.apache.activemq.command.RemoveInfo) removal).getObjectId(), "the stopped consumer's id");
        expectEquals(0, stopped.getIntProperty("consumerCount"), "consumerCount after the stop");

        MessageProducer producer = otherSession.createProducer(queue);
        Message producing = receive(producerEvents, "the advisory of the producer's start");
        Object producerInfo = dataStructure(producing);
        expect(producerInfo instanceof org.apache.activemq.command.ProducerInfo,
                "a producer start carries a ProducerInfo, got " + producerInfo);
        expectEquals(queue, ((org.apache.activemq.command.ProducerInfo) producerInfo).getDestination(),
                "the advisory names the producer's queue");
        expectEquals(1, producing.getIntProperty("producerCount"), "producerCount after the start");
        producer.close();
        Message produced = receive(producerEvents, "the advisory of the producer's stop");
        Object producerRemoval = dataStructure(produced);
        expect(producerRemoval instanceof org.apache.activemq.command.RemoveInfo,
                "a producer stop carries a RemoveInfo, got " + producerRemoval);
        expectEquals(((org.apache.activemq.command.ProducerInfo) producerInfo).getProducerId(),
                ((org.apache.activemq.command.RemoveInfo) producerRemoval).getObjectId(), "the stopped producer's id");
        expectEquals(0, produced.getIntProperty("producerCount"), "producerCount after the stop");

        other.close();
        Object closed = dataStructure(receive(connectionEvents, "the connection advisory of a closed connection"));
        expect(closed instanceof org.apache.activemq.command.RemoveInfo,
                "a connection stop carries a RemoveInfo, got " + closed);
        expectEquals(((org.apache.activemq.command.ConnectionInfo) opened).getConnectionId(),
                ((org.apache.activemq.command.RemoveInfo) closed).getObjectId(), "the closed connection's id");
    }

    /**
     * flow_control (ferromq started with a 64 KiB queue memory limit): a synchronous sender
     * (jms.alwaysSyncSend) and an asynchronous one paced by its producer window
     * (jms.producerWindowSize) each block once the queue is full of non-persistent messages
     * (which cannot page out), and resume as a consumer drains; nothing is lost or reordered.
     */
    void flowControl() throws Exception {
        for (String options : new String[] {"jms.alwaysSyncSend=true", "jms.producerWindowSize=4096"}) {
            String queueName = name(options.startsWith("jms.always") ? "sync" : "window");
            int total = 300;
            Connection producerConnection = connect(withOptions(url, options));
            Session producerSession = producerConnection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageProducer producer = producerSession.createProducer(producerSession.createQueue(queueName));
            producer.setDeliveryMode(DeliveryMode.NON_PERSISTENT);
            byte[] kilobyte = new byte[1024];
            AtomicInteger sent = new AtomicInteger();
            CompletableFuture<Void> sending = CompletableFuture.runAsync(() -> {
                try {
                    for (int i = 0; i < total; i++) {
                        BytesMessage message = producerSession.createBytesMessage();
                        message.writeBytes(kilobyte);
                        message.setIntProperty("index", i);
                        producer.send(message);
                        sent.incrementAndGet();
                    }
                } catch (JMSException e) {
                    throw new RuntimeException(e);
                }
            });
            Thread.sleep(QUIET_MS);
            expect(!sending.isDone(), options + ": the producer should block at the memory limit, but it sent all "
                    + total + " (" + sent.get() + ")");
            expect(sent.get() < total, options + ": sent " + sent.get() + " of " + total + " while blocked");
            Connection consumerConnection = connect();
            Session consumerSession = consumerConnection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageConsumer consumer = consumerSession.createConsumer(consumerSession.createQueue(queueName));
            for (int i = 0; i < total; i++) {
                expectEquals(i, receive(consumer, options + ": message " + i + " of " + total).getIntProperty("index"),
                        options + ": every message, in order, once the consumer drains");
            }
            sending.get(RECEIVE_MS, TimeUnit.MILLISECONDS);
            expectNothing(consumer, options + ": nothing extra");
            producerConnection.close();
            consumerConnection.close();
        }
    }

    /**
     * flow_control_fail (ferromq started with a 64 KiB queue memory limit and
     * send_fail_if_no_space): a synchronous send over the limit fails with
     * ResourceAllocationException, and succeeds again once a consumer drains.
     */
    void flowControlFail() throws Exception {
        String queueName = name("queue");
        Connection connection = connect(withOptions(url, "jms.alwaysSyncSend=true"));
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer producer = session.createProducer(session.createQueue(queueName));
        producer.setDeliveryMode(DeliveryMode.NON_PERSISTENT);
        byte[] kilobyte = new byte[1024];
        int accepted = 0;
        javax.jms.ResourceAllocationException refused = null;
        while (refused == null && accepted < 10_000) {
            BytesMessage message = session.createBytesMessage();
            message.writeBytes(kilobyte);
            try {
                producer.send(message);
                accepted++;
            } catch (javax.jms.ResourceAllocationException e) {
                refused = e;
            }
        }
        expect(refused != null, "no ResourceAllocationException after " + accepted + " sends of 1 KiB");
        expect(accepted > 0, "the first sends fit");
        MessageConsumer consumer = session.createConsumer(session.createQueue(queueName));
        for (int i = 0; i < accepted; i++) {
            receive(consumer, "accepted message " + i + " of " + accepted);
        }
        producer.send(session.createTextMessage("after draining"));
        expectEquals("after draining", text(receive(consumer, "the send after draining")), "sends work again");
    }

    /**
     * temp_store (ferromq started with a journal, so a temporary store, of 16 MiB, a 64 KiB
     * queue memory limit without producer flow control and send_fail_if_no_space):
     * non-persistent messages beyond the queue's memory spill to the temporary store; once it
     * is full a synchronous send fails with ResourceAllocationException naming it; a consumer
     * then gets every accepted message, in order.
     */
    void tempStore() throws Exception {
        String queueName = name("queue");
        Connection connection = connect(withOptions(url, "jms.alwaysSyncSend=true"));
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer producer = session.createProducer(session.createQueue(queueName));
        producer.setDeliveryMode(DeliveryMode.NON_PERSISTENT);
        byte[] payload = new byte[8 * 1024];
        int accepted = 0;
        javax.jms.ResourceAllocationException refused = null;
        while (refused == null && accepted < 10_000) {
            BytesMessage message = session.createBytesMessage();
            message.writeBytes(payload);
            message.setIntProperty("index", accepted);
            try {
                producer.send(message);
                accepted++;
            } catch (javax.jms.ResourceAllocationException e) {
                refused = e;
            }
        }
        expect(refused != null, "no ResourceAllocationException after " + accepted + " sends of 8 KiB");
        expect(accepted > 1000, "only " + accepted + " sends of 8 KiB beyond a 64 KiB memory limit");
        expect(String.valueOf(refused.getMessage()).contains("Temp Store"),
                "the refusal names the temporary store: " + refused.getMessage());
        MessageConsumer consumer = session.createConsumer(session.createQueue(queueName));
        for (int i = 0; i < accepted; i++) {
            expectEquals(i, receive(consumer, "spilled message " + i + " of " + accepted).getIntProperty("index"),
                    "every accepted message, in order");
        }
        connection.close();
    }

    /**
     * gc_inactive_destinations (ferromq started with gc_inactive_destinations on every queue,
     * after 300 ms): a queue used and left empty, without consumers or producers, is removed,
     * which AdvisorySupport's destination advisory topic announces with a DestinationInfo
     * whose operation is remove.
     */
    void gcInactiveDestinations() throws Exception {
        Connection connection = connect();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        org.apache.activemq.command.ActiveMQQueue queue =
                new org.apache.activemq.command.ActiveMQQueue(name("queue"));
        MessageConsumer destinationEvents =
                session.createConsumer(org.apache.activemq.advisory.AdvisorySupport.getDestinationAdvisoryTopic(queue));
        MessageProducer producer = session.createProducer(queue);
        producer.send(session.createTextMessage("once"));
        MessageConsumer consumer = session.createConsumer(queue);
        expectEquals("once", text(receive(consumer, "the message")), "the queue works");
        consumer.close();
        producer.close();
        // The queue's creation may be announced first; its removal must follow.
        while (true) {
            Object info = dataStructure(receive(destinationEvents, "the advisory of the queue's removal"));
            expect(info instanceof org.apache.activemq.command.DestinationInfo,
                    "a destination advisory carries a DestinationInfo, got " + info);
            org.apache.activemq.command.DestinationInfo destination = (org.apache.activemq.command.DestinationInfo) info;
            if (!queue.equals(destination.getDestination())) {
                continue;
            }
            if (destination.isRemoveOperation()) {
                break;
            }
            expect(destination.isAddOperation(), "an add or a remove, got " + destination);
        }
    }

    /**
     * slow_consumer_abort (the broker's topic policy aborts consumers slow for 500 ms and
     * announces slow consumers): a subscriber with prefetch 1 that never receives is announced
     * with its ConsumerInfo, then closed by the broker's ConsumerControl, after which the
     * client announces its close and the consumer refuses to receive.
     */
    void slowConsumerAbort() throws Exception {
        Connection connection = connect(withOptions(url, "jms.prefetchPolicy.all=1"));
        Session session = connection.createSession(false, Session.CLIENT_ACKNOWLEDGE);
        org.apache.activemq.command.ActiveMQTopic topic =
                new org.apache.activemq.command.ActiveMQTopic(name("topic"));
        Connection monitor = connect();
        Session monitorSession = monitor.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer slowEvents = monitorSession.createConsumer(
                org.apache.activemq.advisory.AdvisorySupport.getSlowConsumerAdvisoryTopic(topic));
        MessageConsumer consumerEvents = monitorSession.createConsumer(
                org.apache.activemq.advisory.AdvisorySupport.getConsumerAdvisoryTopic(topic));
        MessageConsumer slow = session.createConsumer(topic);
        Object started = dataStructure(receive(consumerEvents, "the subscriber's start"));
        expect(started instanceof org.apache.activemq.command.ConsumerInfo, "a ConsumerInfo, got " + started);
        MessageProducer producer = monitorSession.createProducer(topic);
        producer.setDeliveryMode(DeliveryMode.NON_PERSISTENT);
        for (int i = 0; i < 10; i++) {
            producer.send(monitorSession.createTextMessage("m" + i));
        }
        Object info = dataStructure(receive(slowEvents, "the slow consumer advisory"));
        expect(info instanceof org.apache.activemq.command.ConsumerInfo,
                "a slow consumer advisory carries a ConsumerInfo, got " + info);
        expectEquals(topic, ((org.apache.activemq.command.ConsumerInfo) info).getDestination(),
                "the slow consumer's topic");
        Object stopped = dataStructure(receive(consumerEvents, "the aborted subscriber's close"));
        expect(stopped instanceof org.apache.activemq.command.RemoveInfo,
                "the client closed the aborted consumer, got " + stopped);
        try {
            slow.receive(100);
            throw new CheckFailed("the aborted consumer still receives");
        } catch (javax.jms.IllegalStateException expected) {
            // The consumer is closed.
        }
    }

    static Object dataStructure(Message message) {
        return ((org.apache.activemq.command.ActiveMQMessage) message).getDataStructure();
    }

    /** A browser sees the queue's messages (with a selector) and consumes none. */
    void queueBrowser() throws Exception {
        String queueName = name("queue");
        Connection connection = connect();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        javax.jms.Queue queue = session.createQueue(queueName);
        MessageProducer producer = session.createProducer(queue);
        for (int i = 0; i < 10; i++) {
            producer.send(indexed(session, "b", i));
        }
        List<Integer> seen = new ArrayList<>();
        javax.jms.QueueBrowser browser = session.createBrowser(queue);
        for (java.util.Enumeration<?> e = browser.getEnumeration(); e.hasMoreElements(); ) {
            seen.add(((Message) e.nextElement()).getIntProperty("index"));
        }
        browser.close();
        expectEquals(range(0, 10), seen, "the browser sees every message in order");
        List<Integer> late = new ArrayList<>();
        javax.jms.QueueBrowser selective = session.createBrowser(queue, "index >= 5");
        for (java.util.Enumeration<?> e = selective.getEnumeration(); e.hasMoreElements(); ) {
            late.add(((Message) e.nextElement()).getIntProperty("index"));
        }
        selective.close();
        expectEquals(range(5, 10), late, "a browser with a selector");
        MessageConsumer consumer = session.createConsumer(queue);
        for (int i = 0; i < 10; i++) {
            expectEquals(i, receive(consumer, "b" + i + " after browsing").getIntProperty("index"),
                    "browsing consumed nothing");
        }
    }

    /**
     * AMQ_SCHEDULED_DELAY holds a message back for its delay; it arrives once, without the
     * scheduling property, with its own JMSMessageID and the job id in scheduledJobId.
     */
    void scheduledDelay() throws Exception {
        String queueName = name("queue");
        Connection connection = connect();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer consumer = session.createConsumer(session.createQueue(queueName));
        MessageProducer producer = session.createProducer(session.createQueue(queueName));
        TextMessage delayed = session.createTextMessage("delayed");
        delayed.setLongProperty("AMQ_SCHEDULED_DELAY", 600);
        long sent = System.nanoTime();
        producer.send(delayed);
        producer.send(session.createTextMessage("at once"));
        expectEquals("at once", ((TextMessage) receive(consumer, "the unscheduled message")).getText(),
                "an unscheduled message is not held back behind a scheduled one");
        Message message = receive(consumer, "the delayed message");
        long waitedMs = (System.nanoTime() - sent) / 1_000_000;
        expect(waitedMs >= 600, "the delayed message arrived after " + waitedMs + " ms, before its 600 ms delay");
        expectEquals("delayed", ((TextMessage) message).getText(), "the delayed message's body");
        expectEquals(delayed.getJMSMessageID(), message.getJMSMessageID(), "a one-shot delay keeps the JMSMessageID");
        expectEquals(delayed.getJMSMessageID(), message.getStringProperty("scheduledJobId"), "scheduledJobId");
        expect(!message.propertyExists("AMQ_SCHEDULED_DELAY"), "the delivered copy has no AMQ_SCHEDULED_DELAY");
        expectNothing(consumer, "a delayed message is delivered once");
    }

    /**
     * A transacted consumer rolls a message back seven times: with the default RedeliveryPolicy
     * (maximumRedeliveries 6) the client then poisons it, and the broker moves it to
     * ActiveMQ.DLQ with its JMSMessageID, body and properties, its original destination and
     * the cause recorded; it is gone from its queue.
     */
    void deadLetterQueue() throws Exception {
        String queueName = name("queue");
        Connection connection = connect();
        Session session = connection.createSession(false, Session.CLIENT_ACKNOWLEDGE);
        javax.jms.Queue queue = session.createQueue(queueName);
        TextMessage poison = session.createTextMessage("poison");
        poison.setStringProperty("color", "red");
        poison.setIntProperty("attempt", 42);
        session.createProducer(queue).send(poison);
        String id = poison.getJMSMessageID();
        Session transacted = connection.createSession(true, Session.SESSION_TRANSACTED);
        MessageConsumer consumer = transacted.createConsumer(queue);
        for (int delivery = 1; delivery <= 7; delivery++) {
            Message message = receive(consumer, "delivery " + delivery + " of the poison message");
            expectEquals(id, message.getJMSMessageID(), "JMSMessageID of delivery " + delivery);
            expectEquals(delivery > 1, message.getJMSRedelivered(), "JMSRedelivered of delivery " + delivery);
            transacted.rollback();
        }
        expectNothing(consumer, "after 6 redeliveries the message goes to the dead-letter queue");
        consumer.close();
        MessageConsumer dead = session.createConsumer(session.createQueue("ActiveMQ.DLQ"),
                "JMSMessageID = '" + id + "'");
        Message letter = receive(dead, "the poison message in ActiveMQ.DLQ");
        expectEquals(id, letter.getJMSMessageID(), "the dead letter's JMSMessageID");
        expectEquals("poison", text(letter), "the dead letter's body");
        expectEquals("red", letter.getStringProperty("color"), "the dead letter's string property");
        expectEquals(42, letter.getIntProperty("attempt"), "the dead letter's int property");
        expectEquals(queue, ((org.apache.activemq.command.ActiveMQMessage) letter).getOriginalDestination(),
                "the dead letter's original destination");
        String cause = letter.getStringProperty("dlqDeliveryFailureCause");
        expect(cause != null && cause.contains("exceeds redelivery policy limit"),
                "dlqDeliveryFailureCause names the redelivery limit: " + cause);
        letter.acknowledge();
        MessageConsumer original = session.createConsumer(queue);
        expectNothing(original, "the poison message left its queue");
    }

    /**
     * A message sent with a short time to live while nobody consumes is never delivered; the
     * broker's expiry sweep moves it to ActiveMQ.DLQ (processExpired), where it no longer
     * expires. ferromq's tests sweep every 500 ms; Apache ActiveMQ's default is every 30 s.
     */
    void expiredToDeadLetterQueue() throws Exception {
        String queueName = name("queue");
        Connection connection = connect();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        javax.jms.Queue queue = session.createQueue(queueName);
        MessageProducer producer = session.createProducer(queue);
        TextMessage fleeting = session.createTextMessage("too late");
        producer.send(fleeting, DeliveryMode.PERSISTENT, Message.DEFAULT_PRIORITY, 500);
        String id = fleeting.getJMSMessageID();
        producer.send(session.createTextMessage("in time"));
        // Nothing consumes the queue meanwhile: only the sweep can move the message.
        MessageConsumer dead = session.createConsumer(session.createQueue("ActiveMQ.DLQ"),
                "JMSMessageID = '" + id + "'");
        Message letter = dead.receive(45_000);
        if (letter == null) {
            throw new CheckFailed("the expired message did not reach ActiveMQ.DLQ within 45 s");
        }
        expectEquals("too late", text(letter), "the expired message's body");
        expectEquals(0L, letter.getJMSExpiration(), "a dead letter does not expire");
        expectEquals(queue, ((org.apache.activemq.command.ActiveMQMessage) letter).getOriginalDestination(),
                "the expired message's original destination");
        String cause = letter.getStringProperty("dlqDeliveryFailureCause");
        expect(cause != null && cause.contains("Message Expired"), "dlqDeliveryFailureCause: " + cause);
        MessageConsumer consumer = session.createConsumer(queue);
        expectEquals("in time", text(receive(consumer, "the message that did not expire")),
                "only the unexpired message is delivered");
        expectNothing(consumer, "an expired message is never delivered");
    }

    /** Delay, period and repeat N: N + 1 copies, a period apart, each a message of its own. */
    void scheduledRepeat() throws Exception {
        String queueName = name("queue");
        Connection connection = connect();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer consumer = session.createConsumer(session.createQueue(queueName));
        MessageProducer producer = session.createProducer(session.createQueue(queueName));
        TextMessage repeated = session.createTextMessage("tick");
        repeated.setLongProperty("AMQ_SCHEDULED_DELAY", 300);
        repeated.setLongProperty("AMQ_SCHEDULED_PERIOD", 250);
        repeated.setIntProperty("AMQ_SCHEDULED_REPEAT", 2);
        long sent = System.nanoTime();
        producer.send(repeated);
        List<Long> arrivals = new ArrayList<>();
        java.util.Set<String> ids = new java.util.HashSet<>();
        for (int i = 0; i < 3; i++) {
            Message message = receive(consumer, "copy " + i + " of the repeated message");
            arrivals.add((System.nanoTime() - sent) / 1_000_000);
            expectEquals("tick", ((TextMessage) message).getText(), "copy " + i + "'s body");
            expect(!message.propertyExists("AMQ_SCHEDULED_REPEAT"), "copy " + i + " has no AMQ_SCHEDULED_REPEAT");
            ids.add(message.getJMSMessageID());
        }
        expect(arrivals.get(0) >= 300, "the first copy arrived after " + arrivals + " ms, before its 300 ms delay");
        for (int i = 1; i < 3; i++) {
            // Receive times jitter a little around fires a period apart.
            expect(arrivals.get(i) - arrivals.get(i - 1) >= 200, "copies a period (250 ms) apart: " + arrivals);
        }
        expectEquals(3, ids.size(), "every copy has its own JMSMessageID: " + ids);
        expectNothing(consumer, "repeat 2 means three copies in all");
    }

    // ---------------------------------------------------------------------------------------
    // Helpers

    String name(String what) {
        return "jms-" + check.replace('_', '-') + "-" + what + "-" + unique;
    }

    Connection connect() throws JMSException {
        return connect(url, null);
    }

    Connection connect(String brokerUrl) throws JMSException {
        return connect(brokerUrl, null);
    }

    Connection connect(String brokerUrl, String clientId) throws JMSException {
        Connection connection = new ActiveMQConnectionFactory(brokerUrl).createConnection();
        connections.add(connection);
        if (clientId != null) {
            connection.setClientID(clientId);
        }
        connection.start();
        return connection;
    }

    void closeAll() {
        Collections.reverse(connections);
        for (Connection connection : connections) {
            try {
                connection.close();
            } catch (Exception ignored) {
                // already closed, or the broker is gone
            }
        }
    }

    static String withOptions(String brokerUrl, String options) {
        return brokerUrl + (brokerUrl.contains("?") ? "&" : "?") + options;
    }

    static java.util.concurrent.Executor daemonExecutor() {
        return task -> {
            Thread thread = new Thread(task, "check-worker");
            thread.setDaemon(true);
            thread.start();
        };
    }

    static Message indexed(Session session, String prefix, int index) throws JMSException {
        TextMessage message = session.createTextMessage(prefix + index);
        message.setIntProperty("index", index);
        return message;
    }

    static void setTypedProperties(Message message, int i) throws JMSException {
        message.setBooleanProperty("pBoolean", i % 2 == 0);
        message.setByteProperty("pByte", (byte) (i - 100));
        message.setShortProperty("pShort", (short) (i * 1000 - 20000));
        message.setIntProperty("pInt", Integer.MIN_VALUE + i);
        message.setLongProperty("pLong", i % 2 == 0 ? Long.MIN_VALUE + i : Long.MAX_VALUE - i);
        message.setFloatProperty("pFloat", i + 0.5f);
        message.setDoubleProperty("pDouble", i * Math.PI);
        message.setStringProperty("pString", "värde-" + i + "-日本");
        message.setStringProperty("pEmpty", "");
        message.setObjectProperty("pObject", Integer.valueOf(i));
    }

    static void checkTypedProperties(Message message, int i, String what) throws JMSException {
        expectProperty(message, "pBoolean", i % 2 == 0, what);
        expectProperty(message, "pByte", (byte) (i - 100), what);
        expectProperty(message, "pShort", (short) (i * 1000 - 20000), what);
        expectProperty(message, "pInt", Integer.MIN_VALUE + i, what);
        expectProperty(message, "pLong", i % 2 == 0 ? Long.MIN_VALUE + i : Long.MAX_VALUE - i, what);
        expectProperty(message, "pFloat", i + 0.5f, what);
        expectProperty(message, "pDouble", i * Math.PI, what);
        expectProperty(message, "pString", "värde-" + i + "-日本", what);
        expectProperty(message, "pEmpty", "", what);
        expectProperty(message, "pObject", i, what);
        Set<String> names = new TreeSet<>(Collections.list(castEnumeration(message.getPropertyNames())));
        Set<String> expected = new TreeSet<>(List.of("pBoolean", "pByte", "pShort", "pInt", "pLong", "pFloat",
                "pDouble", "pString", "pEmpty", "pObject"));
        expect(names.containsAll(expected), what + ": property names " + names + " include " + expected);
    }

    static void expectProperty(Message message, String name, Object expected, String what) throws JMSException {
        expectTyped(message.getObjectProperty(name), expected, what + ": property " + name);
    }

    static void expectTyped(Object actual, Object expected, String what) {
        if (actual == null || actual.getClass() != expected.getClass() || !actual.equals(expected)) {
            throw new CheckFailed(what + ": expected " + show(expected) + ", got " + show(actual));
        }
    }

    static String show(Object value) {
        return value == null ? "null" : value.getClass().getSimpleName() + " " + value;
    }

    @SuppressWarnings("unchecked")
    static java.util.Enumeration<String> castEnumeration(java.util.Enumeration<?> names) {
        return (java.util.Enumeration<String>) names;
    }

    static Message receive(MessageConsumer consumer, String what) throws JMSException {
        Message message = consumer.receive(RECEIVE_MS);
        if (message == null) {
            throw new CheckFailed("nothing arrived within " + RECEIVE_MS / 1000 + " s; expected " + what);
        }
        return message;
    }

    static void expectNothing(MessageConsumer consumer, String why) throws JMSException {
        Message message = consumer.receive(QUIET_MS);
        if (message != null) {
            throw new CheckFailed("expected no message (" + why + "), got " + describe(message));
        }
    }

    static String text(Message message) throws JMSException {
        return expectType(TextMessage.class, message).getText();
    }

    static <T> T expectType(Class<T> type, Message message) throws JMSException {
        if (!type.isInstance(message)) {
            throw new CheckFailed("expected a " + type.getSimpleName() + ", got " + describe(message));
        }
        return type.cast(message);
    }

    static String describe(Message message) throws JMSException {
        StringBuilder out = new StringBuilder(message.getClass().getSimpleName());
        out.append(" ").append(message.getJMSMessageID());
        out.append(" to ").append(message.getJMSDestination());
        if (message instanceof TextMessage textMessage) {
            String body = textMessage.getText();
            out.append(" text ").append(body == null ? "null"
                    : '"' + (body.length() > 80 ? body.substring(0, 80) + "..." : body) + '"');
        }
        out.append(" redelivered=").append(message.getJMSRedelivered());
        return out.toString();
    }

    static void expect(boolean condition, String what) {
        if (!condition) {
            throw new CheckFailed(what);
        }
    }

    static void expectEquals(Object expected, Object actual, String what) {
        if (expected == null ? actual != null : !expected.equals(actual)) {
            throw new CheckFailed(what + ": expected " + expected + ", got " + actual);
        }
    }

    static List<Integer> range(int from, int to) {
        List<Integer> numbers = new ArrayList<>();
        for (int i = from; i < to; i++) {
            numbers.add(i);
        }
        return numbers;
    }

    static byte[] randomBytes(int size, long seed) {
        byte[] bytes = new byte[size];
        new Random(seed).nextBytes(bytes);
        return bytes;
    }

    static String sha256(byte[] data) throws Exception {
        StringBuilder hex = new StringBuilder();
        for (byte b : MessageDigest.getInstance("SHA-256").digest(data)) {
            hex.append(String.format("%02x", b));
        }
        return hex.toString();
    }
}
