import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;

import javax.jms.Connection;
import javax.jms.DeliveryMode;
import javax.jms.Message;
import javax.jms.MessageConsumer;
import javax.jms.MessageProducer;
import javax.jms.Queue;
import javax.jms.Session;
import javax.jms.TextMessage;

import org.apache.activemq.ActiveMQConnectionFactory;
import org.apache.activemq.RedeliveryPolicy;

/**
 * The JMS side of the web console's browser test (tests/tests/integration/console.rs), with
 * the real ActiveMQ 5.x client: it fills queues, makes dead letters and consumes, one command
 * a line on stdin, each answered on stdout by "ok COMMAND ..." (or "FAIL why", then exit 1):
 *
 * <pre>
 *   fill QUEUE COUNT        COUNT persistent TextMessages "QUEUE #i", properties region=EU, index=i
 *   send QUEUE COUNT        the same, non-persistent (the rate chart's burst)
 *   deadletter QUEUE COUNT  COUNT persistent messages that a transacted consumer rolls back
 *                           until the client poisons them (maximumRedeliveries 1): the broker
 *                           moves them to ActiveMQ.DLQ
 *   consume QUEUE COUNT     receives COUNT messages (auto-acknowledged), 30 s at most each;
 *                           answers "ok consume QUEUE COUNT BODY,BODY,..." (spaces as _)
 *   subscribe TOPIC NAME    creates the durable subscription NAME of client id console-NAME
 *                           on TOPIC and closes its connection: the subscription is offline
 *   open CLIENTID 1         opens one more connection, with that client id, and keeps it
 *   closed CLIENTID 1       waits (30 s at most) until the broker has closed that connection
 *   quit
 *
 * A space in a QUEUE, TOPIC or CLIENTID is written %20.
 *
 *   java -cp $FERROMQ_JMS_CLASSPATH ConsoleJms --url tcp://127.0.0.1:PORT --user U --password P
 * </pre>
 */
public final class ConsoleJms {
    /** How long a message that should arrive may take. */
    static final long RECEIVE_MS = 30_000;
    /** After this long without a redelivery, every poisoned message has left the queue. */
    static final long SETTLED_MS = 2_000;

    public static void main(String[] args) throws Exception {
        String url = null;
        String user = null;
        String password = null;
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--url" -> url = args[i + 1];
                case "--user" -> user = args[i + 1];
                case "--password" -> password = args[i + 1];
                default -> fail("unknown option " + args[i]);
            }
        }
        if (url == null) {
            fail("usage: ConsoleJms --url tcp://HOST:PORT [--user U --password P]");
        }
        ActiveMQConnectionFactory factory = new ActiveMQConnectionFactory(url);
        factory.setUserName(user);
        factory.setPassword(password);
        RedeliveryPolicy redelivery = factory.getRedeliveryPolicy();
        redelivery.setMaximumRedeliveries(1);
        redelivery.setInitialRedeliveryDelay(0);
        redelivery.setRedeliveryDelay(0);
        Connection connection = factory.createConnection(user, password);
        connection.start();
        System.out.println("ready");
        BufferedReader input = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = input.readLine()) != null) {
            String[] words = line.trim().split("\\s+");
            if (words.length == 1 && words[0].equals("quit")) {
                break;
            }
            if (words.length != 3) {
                fail("a command is COMMAND QUEUE COUNT, not: " + line);
            }
            // A space in a name is written %20 (words are split at spaces).
            String queueName = words[1].replace("%20", " ");
            try {
                if (words[0].equals("subscribe")) {
                    subscribe(factory, queueName, words[2]);
                    System.out.println("ok " + line.trim());
                    continue;
                }
                if (words[0].equals("open")) {
                    open(factory, queueName);
                    System.out.println("ok " + line.trim());
                    continue;
                }
                if (words[0].equals("closed")) {
                    awaitClosed(queueName);
                    System.out.println("ok " + line.trim());
                    continue;
                }
                int count = Integer.parseInt(words[2]);
                switch (words[0]) {
                    case "fill" -> fill(connection, queueName, count, DeliveryMode.PERSISTENT);
                    case "send" -> fill(connection, queueName, count, DeliveryMode.NON_PERSISTENT);
                    case "deadletter" -> deadLetter(connection, queueName, count);
                    case "consume" -> {
                        System.out.println("ok consume " + queueName + " " + count + " " + consume(connection, queueName, count));
                        continue;
                    }
                    default -> fail("unknown command " + words[0]);
                }
            } catch (Exception error) {
                fail(words[0] + " " + queueName + ": " + error);
            }
            System.out.println("ok " + line.trim());
        }
        connection.close();
    }

    static void fill(Connection connection, String queueName, int count, int mode) throws Exception {
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer producer = session.createProducer(session.createQueue(queueName));
        producer.setDeliveryMode(mode);
        for (int i = 0; i < count; i++) {
            TextMessage message = session.createTextMessage(queueName + " #" + i);
            message.setStringProperty("region", "EU");
            message.setIntProperty("index", i);
            producer.send(message);
        }
        session.close();
    }

    static void deadLetter(Connection connection, String queueName, int count) throws Exception {
        fill(connection, queueName, count, DeliveryMode.PERSISTENT);
        Session transacted = connection.createSession(true, Session.SESSION_TRANSACTED);
        MessageConsumer consumer = transacted.createConsumer(transacted.createQueue(queueName));
        int deliveries = 0;
        // Each message: the delivery and one redelivery rolled back; the next one the client
        // poisons instead of handing it over.
        long deadline = System.currentTimeMillis() + 60_000;
        while (System.currentTimeMillis() < deadline) {
            Message message = consumer.receive(deliveries == 0 ? RECEIVE_MS : SETTLED_MS);
            if (message == null) {
                break;
            }
            deliveries++;
            transacted.rollback();
        }
        consumer.close();
        transacted.close();
        if (deliveries < 2 * count) {
            fail("deadletter " + queueName + ": " + deliveries + " deliveries, expected " + 2 * count);
        }
    }

    static void subscribe(ActiveMQConnectionFactory factory, String topicName, String name) throws Exception {
        Connection connection = factory.createConnection(factory.getUserName(), factory.getPassword());
        connection.setClientID("console-" + name);
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        session.createDurableSubscriber(session.createTopic(topicName), name).close();
        connection.close();
    }

    /** The connections of `open`, by client id, each with the latch its exception listener opens. */
    static final java.util.Map<String, java.util.concurrent.CountDownLatch> OPENED = new java.util.HashMap<>();

    static void open(ActiveMQConnectionFactory factory, String clientId) throws Exception {
        Connection connection = factory.createConnection(factory.getUserName(), factory.getPassword());
        connection.setClientID(clientId);
        java.util.concurrent.CountDownLatch lost = new java.util.concurrent.CountDownLatch(1);
        connection.setExceptionListener(error -> lost.countDown());
        connection.start();
        OPENED.put(clientId, lost);
    }

    static void awaitClosed(String clientId) throws Exception {
        java.util.concurrent.CountDownLatch lost = OPENED.get(clientId);
        if (lost == null) {
            fail("closed " + clientId + ": no such connection was opened");
        }
        if (!lost.await(RECEIVE_MS, java.util.concurrent.TimeUnit.MILLISECONDS)) {
            fail("closed " + clientId + ": the connection is still open after " + RECEIVE_MS + " ms");
        }
    }

    static String consume(Connection connection, String queueName, int count) throws Exception {
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        Queue queue = session.createQueue(queueName);
        MessageConsumer consumer = session.createConsumer(queue);
        StringBuilder bodies = new StringBuilder();
        for (int i = 0; i < count; i++) {
            Message message = consumer.receive(RECEIVE_MS);
            if (message == null) {
                fail("consume " + queueName + ": message " + (i + 1) + " of " + count + " did not arrive");
            }
            if (bodies.length() > 0) {
                bodies.append(',');
            }
            bodies.append(message instanceof TextMessage text ? text.getText().replace(' ', '_') : message.getJMSMessageID());
        }
        consumer.close();
        session.close();
        return bodies.toString();
    }

    static void fail(String why) {
        System.out.println("FAIL " + why);
        System.out.flush();
        System.exit(1);
    }
}
